package components

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"minimax-m3/config"
)

// Dashboard is the graph's Grafana dashboard as JSON, built with Grafana's foundation SDK: traffic,
// latency against the alert thresholds, queueing, KV cache use and the targets that answer, each
// panel on the frontend's or the workers' PodMonitor job. Its data source is a variable, so it works
// with whichever Prometheus data source the site's Grafana has.
func Dashboard(c *config.Config) (string, error) {
	front := RequestSeries(c)
	workers := fmt.Sprintf(`job=%q`, MonitorJob(c.Namespace.Name, c.WorkerMonitorName()))
	ds := common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
	panel := func(title, unit string, queries ...[2]string) *timeseries.PanelBuilder {
		p := timeseries.NewPanelBuilder().Title(title).Unit(unit).Datasource(ds).Height(8).Span(12)
		for _, q := range queries {
			p = p.WithTarget(prometheus.NewDataqueryBuilder().Expr(q[0]).LegendFormat(q[1]))
		}
		return p
	}
	quantile := func(q, metric string) string {
		return fmt.Sprintf(`histogram_quantile(%s, sum by (le) (rate(%s_bucket{%s}[5m])))`, q, metric, front)
	}
	// The classic dashboard model, which Grafana's sidecar provisions from a ConfigMap on every
	// Grafana release; the SDK prefers its v2 model, which only newer Grafanas read.
	b := dashboard.NewDashboardBuilder( //nolint:staticcheck // see above
		"MiniMax M3 — "+c.Namespace.Name+"/"+c.GraphName).
		Uid(dashboardUID(c)).
		Tags([]string{"minimax-m3", "dynamo", string(c.Profile)}).
		Refresh("30s").
		Time("now-3h", "now").
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus")).
		WithPanel(panel("Requests", "reqps",
			[2]string{fmt.Sprintf(`sum(rate(dynamo_frontend_requests_total{%s}[5m]))`, front), "all"},
			[2]string{fmt.Sprintf(`sum(rate(dynamo_frontend_requests_total{%s,%s}[5m]))`, front, ServerErrors), "failed"})).
		WithPanel(panel("Time to first token", "s",
			[2]string{quantile("0.5", "dynamo_frontend_time_to_first_token_seconds"), "p50"},
			[2]string{quantile("0.95", "dynamo_frontend_time_to_first_token_seconds"), "p95"},
			[2]string{fmt.Sprintf(`vector(%s)`, seconds(c.AlertTimeToFirstTokenMs())), "alert"})).
		WithPanel(panel("Inter-token latency", "s",
			[2]string{quantile("0.5", "dynamo_frontend_inter_token_latency_seconds"), "p50"},
			[2]string{quantile("0.95", "dynamo_frontend_inter_token_latency_seconds"), "p95"},
			[2]string{fmt.Sprintf(`vector(%s)`, seconds(c.AlertInterTokenLatencyMs())), "alert"})).
		WithPanel(panel("Requests in flight and queued", "short",
			[2]string{fmt.Sprintf(`sum(dynamo_frontend_inflight_requests{%s})`, front), "in flight"},
			[2]string{fmt.Sprintf(`sum(dynamo_frontend_queued_requests{%s})`, front), "queued"})).
		WithPanel(panel("GPU KV cache in use", "percentunit",
			[2]string{fmt.Sprintf(`dynamo_component_kvstats_gpu_cache_usage_percent{%s}`, workers), "{{pod}}"})).
		WithPanel(panel("Targets answering", "short",
			[2]string{fmt.Sprintf(`sum(up{%s})`, front), "frontends"},
			[2]string{fmt.Sprintf(`sum(up{%s})`, workers), "workers"}))
	d, err := b.Build()
	if err != nil {
		return "", fmt.Errorf("building the Grafana dashboard: %w", err)
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// dashboardUID is the dashboard's Grafana UID: stable for a graph, at most Grafana's 40 characters.
func dashboardUID(c *config.Config) string {
	sum := sha256.Sum256([]byte(c.Namespace.Name + "/" + c.GraphName))
	return "minimax-m3-" + hex.EncodeToString(sum[:])[:16]
}
