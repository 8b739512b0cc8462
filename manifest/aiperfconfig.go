package manifest

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"minimax-m3/config"
)

// AIPerfConfigKey is the ConfigMap key AIPerf reads its configuration from.
const AIPerfConfigKey = "perf.yaml"

// aiperfConfig is AIPerf's configuration file as the recipe writes it (perf/perf.yaml). AIPerf
// substitutes the ${...} references from the Job's environment, so one ConfigMap serves every
// concurrency point.
type aiperfConfig struct {
	SchemaVersion string          `yaml:"schemaVersion"`
	Benchmark     aiperfBenchmark `yaml:"benchmark"`
}

type aiperfBenchmark struct {
	Model     string `yaml:"model"`
	Tokenizer struct {
		Name            string `yaml:"name"`
		Revision        string `yaml:"revision"`
		TrustRemoteCode bool   `yaml:"trust_remote_code"`
	} `yaml:"tokenizer"`
	Endpoint struct {
		URL                 string         `yaml:"url"`
		Type                string         `yaml:"type"`
		Streaming           bool           `yaml:"streaming"`
		Timeout             int            `yaml:"timeout"`
		UseServerTokenCount bool           `yaml:"use_server_token_count"`
		Extra               map[string]any `yaml:"extra"`
	} `yaml:"endpoint"`
	Dataset struct {
		Type      string `yaml:"type"`
		Path      string `yaml:"path"`
		Format    string `yaml:"format"`
		Sampling  string `yaml:"sampling"`
		Synthesis struct {
			MaxISL string `yaml:"max_isl"`
			MaxOSL string `yaml:"max_osl"`
		} `yaml:"synthesis"`
	} `yaml:"dataset"`
	Warmup    aiperfLoad `yaml:"warmup"`
	Profiling aiperfLoad `yaml:"profiling"`
	Runtime   struct {
		UI string `yaml:"ui"`
	} `yaml:"runtime"`
	Artifacts struct {
		Dir     string   `yaml:"dir"`
		Summary []string `yaml:"summary"`
		Records []string `yaml:"records"`
	} `yaml:"artifacts"`
	// SLOs are AIPerf's goodput SLOs (BenchmarkConfig.slos in its config module: metric name to
	// threshold in the metric's display unit), from benchmark.goodput.
	SLOs map[string]float64 `yaml:"slos,omitempty"`
}

type aiperfLoad struct {
	Type        string `yaml:"type"`
	Concurrency string `yaml:"concurrency"`
	Requests    string `yaml:"requests"`
}

// AIPerfConfig is the ConfigMap's perf.yaml: the recipe's, with the tokenizer at the model's
// revision and the caps' defaults from the stack's config.
func AIPerfConfig(c *config.Config) (string, error) {
	var a aiperfConfig
	a.SchemaVersion = "2.0"
	b := &a.Benchmark
	b.Model = "${TARGET_MODEL}"
	b.Tokenizer.Name = "${TOKENIZER}"
	b.Tokenizer.Revision = c.Model.Revision
	b.Tokenizer.TrustRemoteCode = true
	b.Endpoint.URL = "${INFERENCE_URL}"
	b.Endpoint.Type = "chat"
	b.Endpoint.Streaming = true
	b.Endpoint.Timeout = c.Benchmark.RequestTimeout
	b.Endpoint.UseServerTokenCount = true
	b.Endpoint.Extra = map[string]any{"ignore_eos": true}
	b.Dataset.Type = "file"
	b.Dataset.Path = "${TRACE_FILE}"
	b.Dataset.Format = "mooncake_trace"
	b.Dataset.Sampling = "sequential"
	b.Dataset.Synthesis.MaxISL = fmt.Sprintf("${MAX_ISL:%d}", c.Benchmark.MaxISL)
	b.Dataset.Synthesis.MaxOSL = fmt.Sprintf("${CAP_OSL:%d}", c.Benchmark.CapOSL)
	b.Warmup = aiperfLoad{Type: "concurrency", Concurrency: "${CONCURRENCY}", Requests: "${CONCURRENCY}"}
	b.Profiling = aiperfLoad{Type: "concurrency", Concurrency: "${CONCURRENCY}", Requests: "${REQUESTS}"}
	b.Runtime.UI = "none"
	b.Artifacts.Dir = "${ARTIFACT_DIR}"
	b.Artifacts.Summary = []string{"json"}
	b.Artifacts.Records = []string{"jsonl"}
	if slos := c.Benchmark.Goodput.AIPerf(); len(slos) > 0 {
		b.SLOs = slos
	}
	out, err := yaml.Marshal(a)
	return string(out), err
}

// AIPerfConfigMapName is the AIPerf ConfigMap of a graph.
func AIPerfConfigMapName(c *config.Config) string { return c.GraphName + "-aiperf-config" }
