package integration

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/components"
	"minimax-m3/config"
)

// The graph's alert rules, evaluated the way `promtool test rules` evaluates them: synthetic series
// in Prometheus's own test notation loaded into its test storage, each rule run by Prometheus's rule
// engine (rules.AlertingRule, with its `for`, its labels and its annotation templates) every 30
// seconds of synthetic time, and the alerts read out at chosen times. Nothing is played: these are
// Prometheus's libraries, at the version the module pins.

const alertsCDUID = "0b7c9a6e-2f4d-4c1e-8a3b-5d6e7f809a1b"

// alertStates evaluates every alert of spec over the series of load (Prometheus's `load 30s`
// block) and returns the alerts firing at each of the given minutes, by alert name, with their
// rendered summary.
func alertStates(t *testing.T, spec monitoringv1.PrometheusRuleSpec, load string, minutes ...int) map[int]map[string]string {
	t.Helper()
	ll, err := promqltest.NewLazyLoader("load 30s\n"+load, promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ll.Close() })
	p := parser.NewParser(parser.Options{})
	var alerting []*rules.AlertingRule
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			expr, err := p.ParseExpr(r.Expr.StrVal)
			require.NoError(t, err, "%s: %s", r.Alert, r.Expr.StrVal)
			hold, err := model.ParseDuration(string(*r.For))
			require.NoError(t, err, r.Alert)
			alerting = append(alerting, rules.NewAlertingRule(r.Alert, expr, time.Duration(hold), 0,
				labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler)))
		}
	}
	query := rules.EngineQueryFunc(ll.QueryEngine(), ll.Queryable())
	out := map[int]map[string]string{}
	end := 0
	for _, m := range minutes {
		end = max(end, m)
	}
	for step := 0; step <= end*2; step++ {
		ts := time.Unix(0, 0).UTC().Add(time.Duration(step) * 30 * time.Second)
		var loadErr error
		ll.WithSamplesTill(ts, func(err error) { loadErr = err })
		require.NoError(t, loadErr)
		for _, r := range alerting {
			_, err := r.Eval(ll.Context(), 0, ts, query, nil, 0)
			require.NoError(t, err, r.Name())
		}
		if step%2 != 0 {
			continue
		}
		for _, m := range minutes {
			if m*2 != step {
				continue
			}
			firing := map[string]string{}
			for _, r := range alerting {
				for _, a := range r.ActiveAlerts() {
					if a.State == rules.StateFiring {
						firing[r.Name()] = a.Annotations.Get("summary")
					}
				}
			}
			out[m] = firing
		}
	}
	return out
}

// aggAlerts is the rule of the agg stack in namespace inference, with observability on.
func aggAlerts(t *testing.T, edit func(*config.Config)) monitoringv1.PrometheusRuleSpec {
	t.Helper()
	c := config.Defaults(config.Aggregated)
	c.Namespace.Name = "inference"
	c.Observability.Enabled = true
	if edit != nil {
		edit(&c)
	}
	require.Empty(t, config.Validate(&c))
	return components.AlertRules(&c, alertsCDUID)
}

// healthy is an agg graph serving well for 40 minutes: a frontend and three workers answering,
// 10 requests a second with fast first tokens and tokens, nothing queued, the KV cache half used,
// and both IMEX daemons of the domain Ready.
func healthy(overrides map[string]string) string {
	f := `job="inference/minimax-m3-agg-gb200-agentic-frontend"`
	w := `job="inference/minimax-m3-agg-gb200-agentic-workers"`
	ds := `namespace="nvidia-dra-driver-gpu",daemonset="computedomain-daemon-` + alertsCDUID + `"`
	series := map[string]string{
		"frontend-up": `up{` + f + `,pod="frontend-0"} 1x80`,
		"worker-0-up": `up{` + w + `,pod="worker-0"} 1x80`,
		"worker-1-up": `up{` + w + `,pod="worker-1"} 1x80`,
		"worker-2-up": `up{` + w + `,pod="worker-2"} 1x80`,
		"ok":          `dynamo_frontend_requests_total{` + f + `,status="success"} 0+300x80`,
		"errors":      `dynamo_frontend_requests_total{` + f + `,status="error",error_type="internal"} 0+1x80`,
		"queued":      `dynamo_frontend_queued_requests{` + f + `} 2x80`,
		"kv":          `dynamo_component_kvstats_gpu_cache_usage_percent{` + w + `,pod="worker-0"} 0.5x80`,
		"imex-ready":  `kube_daemonset_status_number_ready{` + ds + `} 2x80`,
		"imex-want":   `kube_daemonset_status_desired_number_scheduled{` + ds + `} 2x80`,
	}
	// Time to first token: every request under 1 s; inter-token latency: under 20 ms.
	for _, le := range []string{"0.5", "1", "5", "10", "+Inf"} {
		inc := "300"
		if le == "0.5" {
			inc = "200"
		}
		series["ttft-"+le] = fmt.Sprintf(`dynamo_frontend_time_to_first_token_seconds_bucket{%s,le=%q} 0+%sx80`, f, le, inc)
	}
	for _, le := range []string{"0.01", "0.02", "0.05", "0.1", "+Inf"} {
		inc := "3000"
		if le == "0.01" {
			inc = "2000"
		}
		series["itl-"+le] = fmt.Sprintf(`dynamo_frontend_inter_token_latency_seconds_bucket{%s,le=%q} 0+%sx80`, f, le, inc)
	}
	for k, v := range overrides {
		series[k] = v
	}
	var b strings.Builder
	for _, s := range series {
		if s != "" {
			b.WriteString("  " + s + "\n")
		}
	}
	return b.String()
}

func TestAlertRulesFireAndResolveOnSyntheticSeries(t *testing.T) {
	parallel(t)
	spec := aggAlerts(t, nil)
	f := `job="inference/minimax-m3-agg-gb200-agentic-frontend"`
	w := `job="inference/minimax-m3-agg-gb200-agentic-workers"`
	ds := `namespace="nvidia-dra-driver-gpu",daemonset="computedomain-daemon-` + alertsCDUID + `"`

	t.Run("a healthy graph raises nothing", func(t *testing.T) {
		for m, firing := range alertStates(t, spec, healthy(nil), 10, 30) {
			assert.Empty(t, firing, "minute %d", m)
		}
	})

	// Each case: what goes wrong (series replacing the healthy ones) from minute 10 to 25, the
	// alert that must fire by minute 20 (its `for` is 5 minutes) and be gone again at 35.
	for _, tc := range []struct {
		name, alert, summary string
		series               map[string]string
	}{
		{"a worker stops answering", components.AlertWorkersDown, "2 of the 3 workers of inference/minimax-m3-agg-gb200-agentic answer Prometheus.",
			map[string]string{"worker-2-up": `up{` + w + `,pod="worker-2"} 1x19 0x30 1x30`}},
		{"the frontend stops answering", components.AlertFrontendDown, "No frontend of inference/minimax-m3-agg-gb200-agentic answers Prometheus",
			map[string]string{"frontend-up": `up{` + f + `,pod="frontend-0"} 1x19 0x30 1x30`}},
		// A worker's pod is gone (deleted, its tray drained): its series go stale.
		{"a worker is gone", components.AlertWorkersDown, "2 of the 3 workers of inference/minimax-m3-agg-gb200-agentic answer Prometheus.",
			map[string]string{"worker-1-up": `up{` + w + `,pod="worker-1"} 1x19 stale _x29 1x30`}},
		{"errors pass 5%", components.AlertRequestErrors, "of the requests to inference/minimax-m3-agg-gb200-agentic fail, over 0.05.",
			map[string]string{"errors": `dynamo_frontend_requests_total{` + f + `,status="error",error_type="internal"} 0+1x19 19+60x30 1819+1x30`}},
		{"requests queue up", components.AlertRequestsQueued, "requests wait at the frontend of inference/minimax-m3-agg-gb200-agentic for a first token, over 64.",
			map[string]string{"queued": `dynamo_frontend_queued_requests{` + f + `} 2x19 200x30 2x30`}},
		{"a KV cache fills", components.AlertKVCacheFull, "of its GPU KV cache in use.",
			map[string]string{"kv": `dynamo_component_kvstats_gpu_cache_usage_percent{` + w + `,pod="worker-0"} 0.5x19 0.99x30 0.5x30`}},
		{"an IMEX daemon is not Ready", components.AlertIMEXDaemonsNotReady, "An IMEX daemon of ComputeDomain inference/minimax-m3-agg-gb200-agentic-cd is not Ready",
			map[string]string{"imex-ready": `kube_daemonset_status_number_ready{` + ds + `} 2x19 1x30 2x30`}},
		// First tokens slow down: from minute 10 every request takes 5 to 10 s.
		{"first tokens slow down", components.AlertTimeToFirstToken, "95th percentile time to first token of inference/minimax-m3-agg-gb200-agentic is",
			map[string]string{
				"ttft-0.5": fmt.Sprintf(`dynamo_frontend_time_to_first_token_seconds_bucket{%s,le="0.5"} 0+200x19 3800+0x30 3800+200x30`, f),
				"ttft-1":   fmt.Sprintf(`dynamo_frontend_time_to_first_token_seconds_bucket{%s,le="1"} 0+300x19 5700+0x30 5700+300x30`, f),
				"ttft-5":   fmt.Sprintf(`dynamo_frontend_time_to_first_token_seconds_bucket{%s,le="5"} 0+300x19 5700+0x30 5700+300x30`, f),
			}},
		{"tokens slow down", components.AlertInterTokenLatency, "95th percentile inter-token latency of inference/minimax-m3-agg-gb200-agentic is",
			map[string]string{
				"itl-0.01": fmt.Sprintf(`dynamo_frontend_inter_token_latency_seconds_bucket{%s,le="0.01"} 0+2000x19 38000+0x30 38000+2000x30`, f),
				"itl-0.02": fmt.Sprintf(`dynamo_frontend_inter_token_latency_seconds_bucket{%s,le="0.02"} 0+3000x19 57000+0x30 57000+3000x30`, f),
				"itl-0.05": fmt.Sprintf(`dynamo_frontend_inter_token_latency_seconds_bucket{%s,le="0.05"} 0+3000x19 57000+0x30 57000+3000x30`, f),
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := alertStates(t, spec, healthy(tc.series), 9, 12, 20, 40)
			assert.Empty(t, states[9], "before anything goes wrong")
			assert.NotContains(t, states[12], tc.alert, "pending for its 5 minutes, not yet firing")
			require.Contains(t, states[20], tc.alert, "firing")
			assert.Len(t, states[20], 1, "only that alert: %v", states[20])
			assert.Contains(t, states[20][tc.alert], tc.summary)
			assert.NotContains(t, states[20][tc.alert], "error", "the annotation's template renders")
			assert.Empty(t, states[40], "resolved once the series are healthy again")
		})
	}

	t.Run("cancelled requests and clients' mistakes are not the graph's errors", func(t *testing.T) {
		// One misbehaving client: a storm of requests the frontend refuses as invalid (a prompt over
		// the context length) or for a model it does not serve, and requests cancelled by clients.
		clients := map[string]string{
			"cancelled":  `dynamo_frontend_requests_total{` + f + `,status="error",error_type="cancelled"} 0+200x80`,
			"validation": `dynamo_frontend_requests_total{` + f + `,status="error",error_type="validation"} 0+200x80`,
			"not-found":  `dynamo_frontend_requests_total{` + f + `,status="error",error_type="not_found"} 0+200x80`,
		}
		assert.Empty(t, alertStates(t, spec, healthy(clients), 20)[20])
	})

	t.Run("the thresholds follow the config", func(t *testing.T) {
		lenient := aggAlerts(t, func(c *config.Config) {
			c.Observability.Alerts.QueuedRequests = 500
			c.Benchmark.Goodput.TimeToFirstTokenMs = 12000
		})
		slow := map[string]string{
			"queued":   `dynamo_frontend_queued_requests{` + f + `} 200x80`,
			"ttft-0.5": fmt.Sprintf(`dynamo_frontend_time_to_first_token_seconds_bucket{%s,le="0.5"} 0x80`, f),
			"ttft-1":   fmt.Sprintf(`dynamo_frontend_time_to_first_token_seconds_bucket{%s,le="1"} 0x80`, f),
			"ttft-5":   fmt.Sprintf(`dynamo_frontend_time_to_first_token_seconds_bucket{%s,le="5"} 0x80`, f),
		}
		assert.Empty(t, alertStates(t, lenient, healthy(slow), 20)[20], "200 queued under 500; first tokens in 5-10 s under benchmark.goodput's 12 s")
		assert.Equal(t, []string{components.AlertRequestsQueued, components.AlertTimeToFirstToken}, sortedKeys(alertStates(t, spec, healthy(slow), 20)[20]))
	})
}

func TestAlertRulesCountTheFrontendSidecarsOfAnInferencePool(t *testing.T) {
	parallel(t)
	// With the route to an InferencePool the site's traffic is served by the frontend sidecars of the
	// worker pods (their own PodMonitor's job): their slow first tokens are the graph's, and raise
	// the alert; with the route to the frontend the same series belong to no frontend of the graph.
	pool := aggAlerts(t, func(c *config.Config) {
		c.Exposure.Enabled, c.Exposure.Backend = true, config.BackendInferencePool
		c.Exposure.Gateway = config.GatewayRef{Namespace: "gateways", Name: "shared", SectionName: "https"}
		c.Exposure.Hostname, c.Exposure.EndpointPicker.Image = "llm.example.com", "nvcr.io/nvidia/ai-dynamo/dynamo-frontend:1.4.0"
	})
	sidecars := `job="inference/minimax-m3-agg-gb200-agentic-sidecars"`
	slow := map[string]string{}
	for _, le := range []string{"0.5", "1", "5", "10", "+Inf"} {
		inc := "0"
		if le == "10" || le == "+Inf" {
			inc = "300"
		}
		slow["sidecar-ttft-"+le] = fmt.Sprintf(`dynamo_frontend_time_to_first_token_seconds_bucket{%s,pod="worker-0",le=%q} 0+%sx80`, sidecars, le, inc)
	}
	assert.Empty(t, alertStates(t, pool, healthy(nil), 20)[20], "healthy")
	assert.Equal(t, []string{components.AlertTimeToFirstToken}, sortedKeys(alertStates(t, pool, healthy(slow), 20)[20]))
	assert.Empty(t, alertStates(t, aggAlerts(t, nil), healthy(slow), 20)[20], "not the frontend's requests")
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
