package config

import (
	"math"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ObservabilityConfig has the site's prometheus-operator scrape the graph, alert on it and chart it:
// a PodMonitor each for the frontend and the workers, a PrometheusRule, and a Grafana dashboard in a
// ConfigMap for Grafana's dashboard sidecar (kube-prometheus-stack's way). Off by default: the
// cluster then needs none of prometheus-operator's CRDs.
type ObservabilityConfig struct {
	Enabled bool `json:"enabled"`
	// Labels go on the PodMonitors and the PrometheusRule: what the site's Prometheus selects them
	// by (kube-prometheus-stack: `release: <its release name>`).
	Labels map[string]string `json:"labels"`
	// ScrapeInterval is how often Prometheus scrapes each pod (a Prometheus duration such as 15s).
	ScrapeInterval string `json:"scrapeInterval"`
	// DRADriverNamespace is where the NVIDIA DRA driver runs the ComputeDomain's IMEX daemons; the
	// IMEX alert reads kube-state-metrics' series of their DaemonSet there.
	DRADriverNamespace string          `json:"draDriverNamespace"`
	Alerts             AlertsConfig    `json:"alerts"`
	Dashboard          DashboardConfig `json:"dashboard"`
}

// AlertsConfig sets the PrometheusRule's thresholds. A serving team acts on each alert.
type AlertsConfig struct {
	// For is how long a condition holds before its alert fires (a Prometheus duration).
	For string `json:"for"`
	// TimeToFirstTokenMs and InterTokenLatencyMs bound the frontend's 95th percentile over five
	// minutes; 0 takes benchmark.goodput's SLO of the same name, else the default.
	TimeToFirstTokenMs  float64 `json:"timeToFirstTokenMs"`
	InterTokenLatencyMs float64 `json:"interTokenLatencyMs"`
	// ErrorRatio bounds the share of the frontend's requests that fail (cancelled ones aside).
	ErrorRatio float64 `json:"errorRatio"`
	// QueuedRequests bounds the requests waiting at the frontend for a first token.
	QueuedRequests int `json:"queuedRequests"`
	// KVCacheUsage bounds the fullest worker's GPU KV cache use, a fraction of 1.
	KVCacheUsage float64 `json:"kvCacheUsage"`
}

// DashboardConfig is the Grafana dashboard's ConfigMap.
type DashboardConfig struct {
	Enabled bool `json:"enabled"`
	// Namespace is where Grafana's sidecar looks for dashboards; empty is the stack's namespace.
	// The stack never creates or changes that namespace.
	Namespace string `json:"namespace"`
	// Labels are what the sidecar selects dashboard ConfigMaps by (its default: grafana_dashboard=1).
	Labels map[string]string `json:"labels"`
}

// Default alert thresholds when neither alerts nor benchmark.goodput set them.
const (
	defaultAlertTTFTMs = 5000
	defaultAlertITLMs  = 50
)

// AlertTimeToFirstTokenMs is the TTFT threshold in effect: observability.alerts', else the
// benchmark's goodput SLO, else the default.
func (c *Config) AlertTimeToFirstTokenMs() float64 {
	return firstPositive(c.Observability.Alerts.TimeToFirstTokenMs, c.Benchmark.Goodput.TimeToFirstTokenMs, defaultAlertTTFTMs)
}

// AlertInterTokenLatencyMs is the ITL threshold in effect, chosen as AlertTimeToFirstTokenMs.
func (c *Config) AlertInterTokenLatencyMs() float64 {
	return firstPositive(c.Observability.Alerts.InterTokenLatencyMs, c.Benchmark.Goodput.InterTokenLatencyMs, defaultAlertITLMs)
}

func firstPositive(vs ...float64) float64 {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// DashboardNamespace is where the dashboard ConfigMap goes.
func (c *Config) DashboardNamespace() string {
	if c.Observability.Dashboard.Namespace != "" {
		return c.Observability.Dashboard.Namespace
	}
	return c.Namespace.Name
}

// Names of the observability objects, from the graph's name.
func (c *Config) FrontendMonitorName() string { return c.GraphName + "-frontend" }
func (c *Config) WorkerMonitorName() string   { return c.GraphName + "-workers" }
func (c *Config) SidecarMonitorName() string  { return c.GraphName + "-sidecars" }
func (c *Config) AlertRuleName() string       { return c.GraphName + "-alerts" }
func (c *Config) DashboardName() string       { return c.Namespace.Name + "-" + c.GraphName + "-dashboard" }

// DashboardKey is the dashboard's file name in its ConfigMap: Grafana's sidecar writes each key to a
// file of that name, so it carries the stack's namespace as well, like the ConfigMap's name.
func (c *Config) DashboardKey() string { return c.Namespace.Name + "-" + c.GraphName + ".json" }

func (o ObservabilityConfig) validate(v validator, key string, c *Config) {
	if !o.Enabled {
		return
	}
	v.labels(key+".labels", o.Labels)
	if v.promDuration(key+".scrapeInterval", o.ScrapeInterval) && !nonZeroDigit.MatchString(o.ScrapeInterval) {
		v.add(key+".scrapeInterval", "%q must be longer than zero", o.ScrapeInterval)
	}
	v.dns1123Label(key+".draDriverNamespace", o.DRADriverNamespace)
	a := o.Alerts
	v.promDuration(key+".alerts.for", a.For)
	for k, f := range map[string]float64{"timeToFirstTokenMs": a.TimeToFirstTokenMs, "interTokenLatencyMs": a.InterTokenLatencyMs,
		"errorRatio": a.ErrorRatio, "kvCacheUsage": a.KVCacheUsage} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			v.add(key+".alerts."+k, "is %g: use a finite number", f)
		}
	}
	for k, f := range map[string]float64{"timeToFirstTokenMs": a.TimeToFirstTokenMs, "interTokenLatencyMs": a.InterTokenLatencyMs} {
		if f < 0 {
			v.add(key+".alerts."+k, "is %g: use a positive number of milliseconds, or 0 for benchmark.goodput's SLO or the default", f)
		}
	}
	if a.ErrorRatio <= 0 || a.ErrorRatio >= 1 {
		v.add(key+".alerts.errorRatio", "is %g: use a share of requests between 0 and 1, such as 0.05", a.ErrorRatio)
	}
	v.atLeast(key+".alerts.queuedRequests", a.QueuedRequests, 1)
	if a.KVCacheUsage <= 0 || a.KVCacheUsage > 1 {
		v.add(key+".alerts.kvCacheUsage", "is %g: use a fraction of the KV cache, above 0 and at most 1, such as 0.95", a.KVCacheUsage)
	}
	d := o.Dashboard
	if d.Enabled {
		if d.Namespace != "" {
			v.dns1123Label(key+".dashboard.namespace", d.Namespace)
			if strings.HasPrefix(d.Namespace, "kube-") {
				v.add(key+".dashboard.namespace", "%q is one of Kubernetes' own namespaces (kube-*): choose the namespace Grafana's sidecar watches", d.Namespace)
			}
		}
		v.labels(key+".dashboard.labels", d.Labels)
		if len(d.Labels) == 0 {
			v.add(key+".dashboard.labels", "is empty: Grafana's sidecar finds dashboards by a label (its default: grafana_dashboard=1)")
		}
	}
	// The operator leaves the metrics-enabled label off a pod whose component opts out: the monitors
	// would select nothing, and the down alerts fire for ever.
	optedOut := func(k string, annotations map[string]string) {
		if annotations["nvidia.com/enable-metrics"] == "false" {
			v.add(k+".podAnnotations.nvidia.com/enable-metrics", "\"false\" takes the pods out of the monitors observability.enabled creates: remove it, or turn observability off")
		}
	}
	optedOut("frontend", c.Frontend.PodAnnotations)
	for _, r := range c.Workers() {
		optedOut(r.Key, r.Config.PodAnnotations)
	}
	for _, n := range []string{c.FrontendMonitorName(), c.WorkerMonitorName(), c.SidecarMonitorName(), c.AlertRuleName(), c.DashboardName()} {
		if len(n) > validation.DNS1123SubdomainMaxLength {
			v.add("graphName", "the monitoring object name %q derived from it is longer than %d characters", n, validation.DNS1123SubdomainMaxLength)
		}
	}
}

// promDurationPattern is prometheus-operator's Duration (monitoring/v1's types.go).
var promDurationPattern = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

// stackLabelKeys are the labels the stack puts on every object it creates, which say whose it is:
// no configured label may replace them.
var stackLabelKeys = []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "app.kubernetes.io/instance"}

// labels checks label keys and values.
func (v validator) labels(key string, m map[string]string) {
	for k, val := range m {
		if slices.Contains(stackLabelKeys, k) {
			v.add(key+"."+k, "is a label the stack sets on every object it creates, to say whose it is: choose another label")
			continue
		}
		v.errs(key+"."+k, k, "label key", validation.IsQualifiedName(k))
		v.errs(key+"."+k, val, "label value", validation.IsValidLabelValue(val))
	}
}

// promDuration checks a Prometheus duration: a Go duration of whole seconds or more, as
// prometheus-operator's CRDs accept (digits and the units ms, s, m, h, d, w, y).
// It says whether s is one.
func (v validator) promDuration(key, s string) bool {
	if s == "" || !promDurationPattern.MatchString(s) {
		v.add(key, "%q is not a Prometheus duration such as 30s, 5m or 1h", s)
		return false
	}
	return true
}

// nonZeroDigit matches a duration longer than zero.
var nonZeroDigit = regexp.MustCompile(`[1-9]`)
