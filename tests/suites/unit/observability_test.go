package unit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"minimax-m3/components"
	"minimax-m3/config"
)

const (
	podMonitorType     = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
	prometheusRuleType = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
)

// observabilityOn turns observability on with the given fields of its object (JSON values), and
// sets the other keys in extra.
func observabilityOn(fields map[string]string, extra ...string) map[string]string {
	parts := []string{`"enabled": true`}
	for k, v := range fields {
		parts = append(parts, fmt.Sprintf("%q: %s", k, v))
	}
	out := map[string]string{"minimax-m3:observability": "{" + strings.Join(parts, ", ") + "}"}
	for i := 0; i+1 < len(extra); i += 2 {
		out[extra[i]] = extra[i+1]
	}
	return out
}

func TestObservabilityIsOffByDefaultAndAddsNothing(t *testing.T) {
	for _, stack := range []string{"agg", "disagg"} {
		r := mustRun(t, stack, nil)
		for _, res := range r.resources {
			assert.NotContains(t, res.Type, "monitoring.coreos.com", stack)
			assert.NotEqual(t, "dashboard", res.Name, stack)
		}
	}
}

func TestObservabilityMonitorsTheGraphsPodsOnTheOperatorsPorts(t *testing.T) {
	r := mustRun(t, "disagg", observabilityOn(map[string]string{"labels": `{"release": "kube-prometheus-stack"}`}))
	graph := "minimax-m3-disagg-gb200-agentic"
	monitors := map[string]recorded{}
	for _, m := range r.byType(podMonitorType) {
		monitors[decode[string](t, m, "metadata", "name")] = m
	}
	require.Len(t, monitors, 2)

	front := decode[monitoringv1.PodMonitorSpec](t, monitors[graph+"-frontend"], "spec")
	assert.Equal(t, map[string]string{
		"nvidia.com/dynamo-graph-deployment-name": graph,
		"nvidia.com/dynamo-component-type":        "frontend",
		"nvidia.com/metrics-enabled":              "true",
	}, front.Selector.MatchLabels)
	assert.Equal(t, []string{"inference"}, front.NamespaceSelector.MatchNames, "the stack's namespace only")
	require.Len(t, front.PodMetricsEndpoints, 1)
	assert.Equal(t, "http", *front.PodMetricsEndpoints[0].Port)
	assert.Equal(t, "/metrics", front.PodMetricsEndpoints[0].Path)
	assert.Equal(t, monitoringv1.Duration("15s"), front.PodMetricsEndpoints[0].Interval)

	workers := decode[monitoringv1.PodMonitorSpec](t, monitors[graph+"-workers"], "spec")
	assert.Equal(t, map[string]string{"nvidia.com/dynamo-graph-deployment-name": graph, "nvidia.com/metrics-enabled": "true"}, workers.Selector.MatchLabels)
	assert.Equal(t, []metav1.LabelSelectorRequirement{{Key: "nvidia.com/dynamo-component-type", Operator: metav1.LabelSelectorOpIn, Values: []string{"worker", "prefill", "decode"}}},
		workers.Selector.MatchExpressions, "prefill and decode pods, and an older graph's typed worker")
	assert.Equal(t, "system", *workers.PodMetricsEndpoints[0].Port)

	for name, m := range monitors {
		labels := decode[map[string]string](t, m, "metadata", "labels")
		assert.Equal(t, "kube-prometheus-stack", labels["release"], "%s: what the site's Prometheus selects by", name)
		assert.Equal(t, "disagg", labels["app.kubernetes.io/instance"], name)
		assert.Contains(t, m.RPC.GetParent(), "minimax-m3:index:Monitoring", "%s: under the graph's component in preview", name)
	}
	rule := r.one(t, prometheusRuleType)
	assert.Contains(t, rule.RPC.GetParent(), "minimax-m3:index:Monitoring")
	assert.Equal(t, "kube-prometheus-stack", decode[map[string]string](t, rule, "metadata", "labels")["release"])
}

func alertsOf(t *testing.T, r *result) map[string]monitoringv1.Rule {
	t.Helper()
	spec := decode[monitoringv1.PrometheusRuleSpec](t, r.one(t, prometheusRuleType), "spec")
	require.Len(t, spec.Groups, 1)
	out := map[string]monitoringv1.Rule{}
	for _, rule := range spec.Groups[0].Rules {
		out[rule.Alert] = rule
	}
	return out
}

func exprOf(r monitoringv1.Rule) string { return r.Expr.StrVal }

func TestObservabilityAlertsUseTheBenchmarksSLOsAndTheGraphsShape(t *testing.T) {
	agg := alertsOf(t, mustRun(t, "agg", observabilityOn(nil)))
	assert.Contains(t, exprOf(agg[components.AlertWorkersDown]), `(count(up{job="inference/minimax-m3-agg-gb200-agentic-workers"} == 1) or vector(0)) < 3`)
	assert.Contains(t, exprOf(agg[components.AlertTimeToFirstToken]), "> 5", "the default TTFT bound, 5000 ms, in seconds")
	assert.Equal(t, monitoringv1.Duration("5m"), *agg[components.AlertRequestErrors].For)
	assert.Equal(t, "critical", agg[components.AlertRequestErrors].Labels["severity"])
	assert.Equal(t, "warning", agg[components.AlertWorkersDown].Labels["severity"], "a rollout takes a worker down for a while")
	scaled := alertsOf(t, mustRun(t, "agg", observabilityOn(nil, "minimax-m3:worker", `{"scalingAdapter": true}`)))
	assert.True(t, strings.HasSuffix(exprOf(scaled[components.AlertWorkersDown]), "< 1"), "an autoscaler owns the count: down is none answering")
	imex := exprOf(agg[components.AlertIMEXDaemonsNotReady])
	assert.Contains(t, imex, `daemonset="computedomain-daemon-`+computeDomainUID+`"`, "the DRA driver names the domain's DaemonSet after its UID")
	assert.Contains(t, imex, `namespace="nvidia-dra-driver-gpu"`)

	disagg := alertsOf(t, mustRun(t, "disagg", observabilityOn(nil,
		"minimax-m3:benchmark", `{"goodput": {"timeToFirstTokenMs": 2000, "interTokenLatencyMs": 25}}`)))
	assert.Contains(t, exprOf(disagg[components.AlertWorkersDown]), "< 6", "3 prefill and 3 decode workers")
	assert.Contains(t, exprOf(disagg[components.AlertTimeToFirstToken]), "> 2", "benchmark.goodput's TTFT")
	assert.True(t, strings.HasSuffix(exprOf(disagg[components.AlertInterTokenLatency]), "> 0.025"))

	own := alertsOf(t, mustRun(t, "disagg", observabilityOn(map[string]string{"alerts": `{"timeToFirstTokenMs": 8000}`},
		"minimax-m3:benchmark", `{"goodput": {"timeToFirstTokenMs": 2000}}`)))
	assert.True(t, strings.HasSuffix(exprOf(own[components.AlertTimeToFirstToken]), "> 8"), "the alert's own bound wins")

	existing := alertsOf(t, mustRun(t, "agg", observabilityOn(nil,
		"minimax-m3:computeDomain", `{"create": false, "channelClaimTemplate": "rack-a-channel"}`)))
	assert.NotContains(t, existing, components.AlertIMEXDaemonsNotReady, "a domain the stack did not create is another's to watch")
}

func TestObservabilityDashboardGoesWhereGrafanasSidecarLooks(t *testing.T) {
	r := mustRun(t, "agg", observabilityOn(map[string]string{"dashboard": `{"namespace": "monitoring"}`}))
	cm := r.named(t, "kubernetes:core/v1:ConfigMap", "dashboard")
	assert.Equal(t, "monitoring", decode[string](t, cm, "metadata", "namespace"))
	assert.Equal(t, "1", decode[map[string]string](t, cm, "metadata", "labels")["grafana_dashboard"])
	data := decode[map[string]string](t, cm, "data")
	var board struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	assert.Equal(t, "inference-minimax-m3-agg-gb200-agentic-dashboard", decode[string](t, cm, "metadata", "name"),
		"the stack's namespace in its name: other stacks' dashboards of the same graphName share Grafana's namespace")
	require.NoError(t, json.Unmarshal([]byte(data["inference-minimax-m3-agg-gb200-agentic.json"]), &board), "a file name of its own in Grafana's sidecar")
	assert.Regexp(t, `^minimax-m3-[0-9a-f]{16}$`, board.UID)
	require.NotEmpty(t, board.Panels)
	for _, p := range board.Panels {
		for _, q := range p.Targets {
			if strings.Contains(q.Expr, "{") {
				assert.Regexp(t, `job="inference/minimax-m3-agg-gb200-agentic-(frontend|workers)"`, q.Expr, p.Title)
			}
		}
	}

	off := mustRun(t, "agg", observabilityOn(map[string]string{"dashboard": `{"enabled": false}`}))
	for _, res := range off.byType("kubernetes:core/v1:ConfigMap") {
		assert.NotEqual(t, "dashboard", res.Name)
	}
}

func TestObservabilityConfigThatCannotWorkNamesItsKey(t *testing.T) {
	for key, fields := range map[string]map[string]string{
		"observability.scrapeInterval":                    {"scrapeInterval": `"15"`},
		"observability.alerts.for":                        {"alerts": `{"for": "five minutes"}`},
		"observability.alerts.errorRatio":                 {"alerts": `{"errorRatio": 5}`},
		"observability.alerts.kvCacheUsage":               {"alerts": `{"kvCacheUsage": 0}`},
		"observability.alerts.queuedRequests":             {"alerts": `{"queuedRequests": 0}`},
		"observability.labels.release":                    {"labels": `{"release": "not a label value!"}`},
		"observability.dashboard.labels.bad key!":         {"dashboard": `{"labels": {"bad key!": "1"}}`},
		"observability.draDriverNamespace":                {"draDriverNamespace": `"Not_A_Namespace"`},
		"observability.scrapeInterval ":                   {"scrapeInterval": `"0m"`},
		"observability.alerts.errorRatio ":                {"alerts": `{"errorRatio": "NaN"}`},
		"observability.alerts.kvCacheUsage ":              {"alerts": `{"kvCacheUsage": "+Inf"}`},
		"observability.dashboard.namespace":               {"dashboard": `{"namespace": "kube-system"}`},
		"observability.labels.app.kubernetes.io/instance": {"labels": `{"app.kubernetes.io/instance": "team-b"}`},
	} {
		_, err := run(t, "agg", observabilityOn(fields))
		require.Error(t, err, key)
		assert.Contains(t, err.Error(), "minimax-m3:"+strings.TrimSpace(key)+":", key)
	}
	// A component that opts out of the operator's metrics label would leave the monitors empty.
	_, err := run(t, "agg", observabilityOn(nil, "minimax-m3:worker", `{"podAnnotations": {"nvidia.com/enable-metrics": "false"}}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `minimax-m3:worker.podAnnotations.nvidia.com/enable-metrics: "false" takes the pods out of the monitors`)
	c := config.Defaults(config.Aggregated)
	c.Namespace.Name = "ns"
	assert.Empty(t, config.Validate(&c), "the defaults, observability off")
	c.Observability.Enabled = true
	assert.Empty(t, config.Validate(&c), "the defaults, observability on")
}

// noMonitoringAPI is a cluster without prometheus-operator's CRDs.
type noMonitoringAPI struct{ fakeCluster }

func (noMonitoringAPI) Served(_ context.Context, gvr schema.GroupVersionResource) (bool, error) {
	return gvr.Group != "monitoring.coreos.com", nil
}

func TestObservabilityOnAClusterWithoutPrometheusOperatorIsRefusedBeforeAnythingIsCreated(t *testing.T) {
	r, err := runWith(t, components.Options{Cluster: noMonitoringAPI{fakeCluster{}}}, "agg", observabilityOn(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "observability.enabled: the cluster does not serve podmonitors (monitoring.coreos.com/v1)")
	assert.Empty(t, r.byType("kubernetes:core/v1:Namespace"), "nothing is created")

	// Another team's dashboard of the same name is not taken over.
	theirs := fakeCluster{"configmaps/monitoring/inference-minimax-m3-agg-gb200-agentic-dashboard": {"app.kubernetes.io/managed-by": "grafana-team"}}
	_, err = runOn(t, theirs, "agg", observabilityOn(map[string]string{"dashboard": `{"namespace": "monitoring"}`}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ConfigMap monitoring/inference-minimax-m3-agg-gb200-agentic-dashboard already exists")
	// Nor with adopt, which takes over the recipe's objects only: this one is in another team's
	// namespace, and the stack would delete it.
	_, err = runOn(t, theirs, "agg", observabilityOn(map[string]string{"dashboard": `{"namespace": "monitoring"}`}, "minimax-m3:adopt", "true"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "adopt does not take over an object the recipe has no part in")
}
