package components

import (
	"fmt"
	"regexp"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	k8smeta "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// The ports the operator gives a graph's containers, and where each serves Prometheus metrics: the
// frontend on its HTTP port, a worker on its system port (DYN_SYSTEM_PORT).
const (
	FrontendMetricsPort = "http"
	WorkerMetricsPort   = "system"
	MetricsPath         = "/metrics"
)

const (
	monitoringAPIVersion = "monitoring.coreos.com/v1"
	monitoringType       = "minimax-m3:index:Monitoring"
)

// MonitoringArgs describes the graph's monitors, alert rules and dashboard.
type MonitoringArgs struct {
	Namespace pulumi.StringInput
	Config    *config.Config
	Meta      StackMeta
	// ComputeDomainUID is the UID of the ComputeDomain the stack created, whose IMEX daemons'
	// DaemonSet the driver names after it. HasComputeDomain false (an existing channel) leaves the
	// IMEX alert out: that domain is its owner's to watch.
	ComputeDomainUID pulumi.StringOutput
	HasComputeDomain bool
	// Index is the graph's number from 0 (scaleOut.graphs): it names the component's children.
	Index int
}

// Monitoring is prometheus-operator's view of the graph: a PodMonitor for the frontend and one for
// the workers, a PrometheusRule, and a Grafana dashboard ConfigMap.
type Monitoring struct {
	pulumi.ResourceState
}

// NewMonitoring creates the graph's monitoring objects, as children of parent (the graph).
func NewMonitoring(ctx *pulumi.Context, name string, args *MonitoringArgs, opts ...pulumi.ResourceOption) (*Monitoring, error) {
	m := &Monitoring{}
	if err := ctx.RegisterComponentResource(monitoringType, name, m, opts...); err != nil {
		return nil, err
	}
	c := args.Config
	labels := stackLabels(ctx)
	for k, v := range c.Observability.Labels {
		labels[k] = pulumi.String(v)
	}
	type monitor struct {
		name string
		spec monitoringv1.PodMonitorSpec
	}
	monitors := []monitor{{c.FrontendMonitorName(), FrontendPodMonitor(c)}, {c.WorkerMonitorName(), WorkerPodMonitor(c)}}
	if c.InferencePool() {
		monitors = append(monitors, monitor{c.SidecarMonitorName(), SidecarPodMonitor(c)})
	}
	for _, pm := range monitors {
		if _, err := newObject(ctx, pm.name, objectArgs{
			APIVersion: monitoringAPIVersion, Kind: "PodMonitor",
			Name: pm.name, Namespace: args.Namespace, Labels: labels,
			Annotations: args.Meta.annotations(ctx, "PodMonitor", pm.name, nil),
			Spec:        pm.spec,
		}, pulumi.Parent(m)); err != nil {
			return nil, err
		}
	}

	// Every alert is known at preview; the IMEX alert's expression waits for the ComputeDomain's
	// UID, which the API server gives it on create.
	rules, err := manifest.Untyped(AlertRules(c, ""))
	if err != nil {
		return nil, err
	}
	if args.HasComputeDomain {
		imex, err := manifest.Untyped(IMEXAlert(c, ""))
		if err != nil {
			return nil, err
		}
		imex["expr"] = args.ComputeDomainUID.ApplyT(func(uid string) string { return IMEXAlert(c, uid).Expr.StrVal }).(pulumi.StringOutput)
		group := rules["groups"].([]any)[0].(map[string]any)
		group["rules"] = append(group["rules"].([]any), imex)
	}
	if _, err := newObjectWithSpec(ctx, c.AlertRuleName(), objectArgs{
		APIVersion: monitoringAPIVersion, Kind: "PrometheusRule",
		Name: c.AlertRuleName(), Namespace: args.Namespace, Labels: labels,
		Annotations: args.Meta.annotations(ctx, "PrometheusRule", c.AlertRuleName(), nil),
	}, rules, pulumi.Parent(m)); err != nil {
		return nil, err
	}

	if d := c.Observability.Dashboard; d.Enabled {
		board, err := Dashboard(c)
		if err != nil {
			return nil, err
		}
		dlabels := stackLabels(ctx)
		for k, v := range d.Labels {
			dlabels[k] = pulumi.String(v)
		}
		if _, err := corev1.NewConfigMap(ctx, graphChild(name, "dashboard", args.Index), &corev1.ConfigMapArgs{
			Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(c.DashboardName()), Namespace: pulumi.String(c.DashboardNamespace()), Labels: dlabels,
				Annotations: args.Meta.annotations(ctx, "ConfigMap", c.DashboardName(), nil)},
			Data: pulumi.StringMap{c.DashboardKey(): pulumi.String(board)},
		}, pulumi.Parent(m)); err != nil {
			return nil, err
		}
	}
	return m, ctx.RegisterResourceOutputs(m, pulumi.Map{})
}

// FrontendPodMonitor scrapes the graph's frontend pods on their HTTP port.
func FrontendPodMonitor(c *config.Config) monitoringv1.PodMonitorSpec {
	sel := k8smeta.LabelSelector{MatchLabels: map[string]string{
		manifest.GraphNameLabel: c.GraphName, manifest.ComponentTypeLabel: "frontend", manifest.MetricsEnabledLabel: "true",
	}}
	return podMonitor(c, sel, FrontendMetricsPort)
}

// WorkerPodMonitor scrapes the graph's worker pods on their system port. The operator types a
// worker worker, prefill or decode (an older graph's prefill and decode pods are typed worker).
func WorkerPodMonitor(c *config.Config) monitoringv1.PodMonitorSpec {
	sel := k8smeta.LabelSelector{
		MatchLabels: map[string]string{manifest.GraphNameLabel: c.GraphName, manifest.MetricsEnabledLabel: "true"},
		MatchExpressions: []k8smeta.LabelSelectorRequirement{{
			Key: manifest.ComponentTypeLabel, Operator: k8smeta.LabelSelectorOpIn, Values: []string{"worker", "prefill", "decode"},
		}},
	}
	return podMonitor(c, sel, WorkerMetricsPort)
}

// SidecarPodMonitor scrapes the frontend sidecars of the graph's worker pods on their HTTP port
// (exposure.backend inferencePool): the requests the site's gateway sends through the pool are
// theirs, not the frontend component's.
func SidecarPodMonitor(c *config.Config) monitoringv1.PodMonitorSpec {
	return podMonitor(c, WorkerPodMonitor(c).Selector, FrontendMetricsPort)
}

// RequestSeries selects the series of the frontends that serve the graph's requests: the frontend
// component's and, with the route to an InferencePool, the workers' frontend sidecars'.
func RequestSeries(c *config.Config) string {
	front := MonitorJob(c.Namespace.Name, c.FrontendMonitorName())
	if !c.InferencePool() {
		return fmt.Sprintf(`job=%q`, front)
	}
	return fmt.Sprintf(`job=~%q`, regexp.QuoteMeta(front)+"|"+regexp.QuoteMeta(MonitorJob(c.Namespace.Name, c.SidecarMonitorName())))
}

func podMonitor(c *config.Config, sel k8smeta.LabelSelector, port string) monitoringv1.PodMonitorSpec {
	return monitoringv1.PodMonitorSpec{
		Selector:          sel,
		NamespaceSelector: monitoringv1.NamespaceSelector{MatchNames: []string{c.Namespace.Name}},
		PodMetricsEndpoints: []monitoringv1.PodMetricsEndpoint{{
			Port: &port, Path: MetricsPath, Interval: monitoringv1.Duration(c.Observability.ScrapeInterval),
		}},
	}
}

// MonitorJob is the job label prometheus-operator gives the targets of a PodMonitor:
// <namespace>/<name>.
func MonitorJob(namespace, monitor string) string { return namespace + "/" + monitor }

// Alert names, each a condition a serving team acts on.
const (
	AlertFrontendDown        = "MiniMaxM3FrontendDown"
	AlertWorkersDown         = "MiniMaxM3WorkersDown"
	AlertTimeToFirstToken    = "MiniMaxM3TimeToFirstTokenHigh"
	AlertInterTokenLatency   = "MiniMaxM3InterTokenLatencyHigh"
	AlertRequestErrors       = "MiniMaxM3RequestErrors"
	AlertRequestsQueued      = "MiniMaxM3RequestsQueued"
	AlertKVCacheFull         = "MiniMaxM3KVCacheFull"
	AlertIMEXDaemonsNotReady = "MiniMaxM3IMEXDaemonsNotReady"
)

// ServerErrors selects the frontend's failed requests that are the graph's fault: not those the
// client cancelled, nor its mistakes (a request the frontend refuses as invalid, a model it does not
// serve), which one misbehaving client can raise at will.
const ServerErrors = `status="error",error_type!~"cancelled|validation|not_found"`

// AlertRules is the graph's PrometheusRule: one group of alerts on the frontend's and the workers'
// metrics (their PodMonitors' jobs) and, with computeDomainUID, on kube-state-metrics' series of
// the domain's IMEX DaemonSet (the DRA driver names it computedomain-daemon-<UID>).
func AlertRules(c *config.Config, computeDomainUID string) monitoringv1.PrometheusRuleSpec {
	a := c.Observability.Alerts
	up := fmt.Sprintf(`job=%q`, MonitorJob(c.Namespace.Name, c.FrontendMonitorName()))
	front := RequestSeries(c)
	workers := fmt.Sprintf(`job=%q`, MonitorJob(c.Namespace.Name, c.WorkerMonitorName()))
	graph := c.Namespace.Name + "/" + c.GraphName
	// The workers the graph runs; a role whose replicas an autoscaler owns counts for one (its
	// count changes under the alert).
	n, scaled := 0, false
	for _, r := range c.Workers() {
		if r.Config.ScalingAdapter {
			n, scaled = n+1, true
			continue
		}
		n += r.Config.Replicas
	}
	workersSummary := fmt.Sprintf("{{ $value }} of the %d workers of %s answer Prometheus.", n, graph)
	if scaled {
		workersSummary = fmt.Sprintf("{{ $value }} workers of %s answer Prometheus, fewer than its %d roles.", graph, n)
	}
	rule := func(alert, severity, expr, summary string) monitoringv1.Rule {
		return alertRule(c, alert, severity, expr, summary)
	}
	quantile := func(metric string) string {
		return fmt.Sprintf(`histogram_quantile(0.95, sum by (le) (rate(%s_bucket{%s}[5m])))`, metric, front)
	}
	rules := []monitoringv1.Rule{
		rule(AlertFrontendDown, "critical",
			fmt.Sprintf(`(count(up{%s} == 1) or vector(0)) < 1`, up),
			"No frontend of "+graph+" answers Prometheus: clients cannot reach the model."),
		// A warning: a rolling update takes a worker down for an engine start, which may outlast the
		// hold on a real tray.
		rule(AlertWorkersDown, "warning",
			fmt.Sprintf(`(count(up{%s} == 1) or vector(0)) < %d`, workers, n),
			workersSummary),
		rule(AlertTimeToFirstToken, "warning",
			fmt.Sprintf(`%s > %s`, quantile("dynamo_frontend_time_to_first_token_seconds"), seconds(c.AlertTimeToFirstTokenMs())),
			fmt.Sprintf("95th percentile time to first token of %s is {{ $value | humanizeDuration }}, over %gms.", graph, c.AlertTimeToFirstTokenMs())),
		rule(AlertInterTokenLatency, "warning",
			fmt.Sprintf(`%s > %s`, quantile("dynamo_frontend_inter_token_latency_seconds"), seconds(c.AlertInterTokenLatencyMs())),
			fmt.Sprintf("95th percentile inter-token latency of %s is {{ $value | humanizeDuration }}, over %gms.", graph, c.AlertInterTokenLatencyMs())),
		rule(AlertRequestErrors, "critical",
			fmt.Sprintf(`sum(rate(dynamo_frontend_requests_total{%s,%s}[5m])) / sum(rate(dynamo_frontend_requests_total{%s}[5m])) > %g`, front, ServerErrors, front, a.ErrorRatio),
			fmt.Sprintf("{{ $value | humanizePercentage }} of the requests to %s fail, over %g.", graph, a.ErrorRatio)),
		rule(AlertRequestsQueued, "warning",
			fmt.Sprintf(`sum(dynamo_frontend_queued_requests{%s}) > %d`, front, a.QueuedRequests),
			fmt.Sprintf("{{ $value }} requests wait at the frontend of %s for a first token, over %d.", graph, a.QueuedRequests)),
		rule(AlertKVCacheFull, "warning",
			fmt.Sprintf(`max(dynamo_component_kvstats_gpu_cache_usage_percent{%s}) > %g`, workers, a.KVCacheUsage),
			fmt.Sprintf("A worker of %s has {{ $value | humanizePercentage }} of its GPU KV cache in use.", graph)),
	}
	if computeDomainUID != "" {
		rules = append(rules, IMEXAlert(c, computeDomainUID))
	}
	return monitoringv1.PrometheusRuleSpec{Groups: []monitoringv1.RuleGroup{{Name: c.GraphName, Rules: rules}}}
}

// IMEXAlert fires while the IMEX DaemonSet of the ComputeDomain with this UID has fewer daemons
// Ready than scheduled, from kube-state-metrics' series.
func IMEXAlert(c *config.Config, computeDomainUID string) monitoringv1.Rule {
	ds := fmt.Sprintf(`namespace=%q,daemonset=%q`, c.Observability.DRADriverNamespace, "computedomain-daemon-"+computeDomainUID)
	return alertRule(c, AlertIMEXDaemonsNotReady, "critical",
		fmt.Sprintf(`kube_daemonset_status_number_ready{%s} < kube_daemonset_status_desired_number_scheduled{%s}`, ds, ds),
		"An IMEX daemon of ComputeDomain "+c.Namespace.Name+"/"+c.ComputeDomainName()+" is not Ready: the workers on its tray cannot start.")
}

// alertRule is one alert of the graph's rule.
func alertRule(c *config.Config, alert, severity, expr, summary string) monitoringv1.Rule {
	forDuration := monitoringv1.Duration(c.Observability.Alerts.For)
	return monitoringv1.Rule{
		Alert: alert, Expr: intstr.FromString(expr), For: &forDuration,
		Labels: map[string]string{"severity": severity, "namespace": c.Namespace.Name, "graph": c.GraphName},
		Annotations: map[string]string{
			"summary":     summary,
			"description": "DynamoGraphDeployment " + c.Namespace.Name + "/" + c.GraphName + ": see docs/day-two.md#alerts for what to do.",
		},
	}
}

func seconds(ms float64) string { return fmt.Sprintf("%g", ms/1000) }
