package config

import "regexp"

// BenchmarkConfig is the recipe's benchmark workflow (perf/perf.yaml): an AIPerf trace replay of a
// Mooncake trace staged on the model cache claim, one concurrency per Job.
type BenchmarkConfig struct {
	// Enabled marks a benchmark stack: the stack creates the AIPerf ConfigMap, its graph carries the
	// benchmark label, and only such a stack may run speculativeDecoding.mode=synthetic (the
	// PR-check policies enforce it).
	Enabled bool `json:"enabled"`
	// Image is AIPerf's.
	Image string `json:"image"`
	// HelperImage runs the sweep's helper pod (cmd/bench), which stages the trace onto the claim
	// and copies the artifacts out, as the recipe's busybox pvc-helper does. It needs sh, tar and
	// sha256sum.
	HelperImage string `json:"helperImage"`
	// TraceFile is the trace's path on the model cache claim, and TraceSHA256 its checksum.
	TraceFile   string `json:"traceFile"`
	TraceSHA256 string `json:"traceSHA256"`
	// MaxISL and CapOSL cap synthesized requests' input and output lengths.
	MaxISL int `json:"maxISL"`
	CapOSL int `json:"capOSL"`
	// RequestTimeout is AIPerf's endpoint timeout, in seconds.
	RequestTimeout int `json:"requestTimeout"`
	// Timeout bounds one concurrency point's Job (Go duration): its activeDeadlineSeconds.
	Timeout string `json:"timeout"`
	// ArtifactDirectory is where on the claim each point writes its own subdirectory.
	ArtifactDirectory string `json:"artifactDirectory"`
	// Tolerations let the benchmark pod follow the frontend onto tainted nodes.
	Tolerations []Toleration `json:"tolerations"`
	// Goodput sets the SLOs AIPerf counts good requests against (its `slos`, what its `--goodput`
	// option sets): a request is good when it meets every SLO set. Unset: no goodput is measured.
	Goodput GoodputSLOs `json:"goodput"`
}

// GoodputSLOs are per-request SLOs in milliseconds, each AIPerf's metric of that name; 0 leaves
// one out.
type GoodputSLOs struct {
	// TimeToFirstTokenMs bounds AIPerf's time_to_first_token.
	TimeToFirstTokenMs float64 `json:"timeToFirstTokenMs,omitempty"`
	// InterTokenLatencyMs bounds AIPerf's inter_token_latency: a request's time per output token
	// after the first (TPOT).
	InterTokenLatencyMs float64 `json:"interTokenLatencyMs,omitempty"`
	// RequestLatencyMs bounds AIPerf's request_latency: end to end.
	RequestLatencyMs float64 `json:"requestLatencyMs,omitempty"`
}

// AIPerf is the SLOs as AIPerf's `slos` names them; empty when none is set.
func (g GoodputSLOs) AIPerf() map[string]float64 {
	out := map[string]float64{}
	for tag, v := range map[string]float64{"time_to_first_token": g.TimeToFirstTokenMs, "inter_token_latency": g.InterTokenLatencyMs, "request_latency": g.RequestLatencyMs} {
		if v > 0 {
			out[tag] = v
		}
	}
	return out
}

// BenchmarkMountPath is where the benchmark Job mounts the model cache claim, as the recipe does.
const BenchmarkMountPath = "/model-cache"

var sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (b BenchmarkConfig) validate(v validator, key string) {
	if !b.Enabled {
		return
	}
	v.image(key+".image", b.Image)
	v.image(key+".helperImage", b.HelperImage)
	v.nonEmpty(key+".traceFile", b.TraceFile)
	if b.TraceSHA256 != "" && !sha256Pattern.MatchString(b.TraceSHA256) {
		v.add(key+".traceSHA256", "%q is not a SHA-256 in lower-case hex (64 characters)", b.TraceSHA256)
	}
	v.atLeast(key+".maxISL", b.MaxISL, 1)
	v.atLeast(key+".capOSL", b.CapOSL, 1)
	v.atLeast(key+".requestTimeout", b.RequestTimeout, 1)
	v.duration(key+".timeout", b.Timeout)
	v.nonEmpty(key+".artifactDirectory", b.ArtifactDirectory)
	for name, ms := range map[string]float64{"timeToFirstTokenMs": b.Goodput.TimeToFirstTokenMs, "interTokenLatencyMs": b.Goodput.InterTokenLatencyMs, "requestLatencyMs": b.Goodput.RequestLatencyMs} {
		if ms < 0 {
			v.add(key+".goodput."+name, "%g: an SLO is a positive number of milliseconds (0 or unset leaves it out)", ms)
		}
	}
}
