package components

import (
	"fmt"
	"path"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

const aiperfConfigVolume = "aiperf-config"

// AIPerfConfigMapName is the AIPerf ConfigMap of a graph.
func AIPerfConfigMapName(c *config.Config) string { return c.GraphName + "-aiperf-config" }

// AIPerfScript is the recipe's benchmark container script: wait for the model, count the trace's
// requests, run AIPerf.
const AIPerfScript = `set -euo pipefail
MODELS_URL="${INFERENCE_URL%/v1/chat/completions}/v1/models"
MODEL_READY_DEADLINE=$((SECONDS + 3600))
echo "Waiting for $TARGET_MODEL at $MODELS_URL"
until wget -qO- -T 5 "$MODELS_URL" | grep -Fq "$TARGET_MODEL"; do
  if ((SECONDS >= MODEL_READY_DEADLINE)); then
    echo "Timed out waiting for $TARGET_MODEL at $MODELS_URL" >&2
    exit 1
  fi
  sleep 5
done
export REQUESTS="$(wc -l < "$TRACE_FILE" | tr -d '[:space:]')"
exec aiperf profile --config /etc/aiperf/perf.yaml
`

// BenchmarkPoint is one concurrency point of a sweep.
type BenchmarkPoint struct {
	// Name is the Job's name; ArtifactDir its own directory on the claim.
	Name, ArtifactDir string
	Concurrency       int
}

// benchmarkPodSpec places the benchmark's pods like the frontend they measure: its scheduling
// (node selector, tolerations, required node labels, priority, runtime and scheduler), plus
// benchmark.tolerations, and the stack's pull secrets.
func benchmarkPodSpec(c *config.Config) corev1.PodSpec {
	pod := sitePodSpec(c.ImagePullSecrets, c.Frontend.Scheduling)
	for _, t := range c.Benchmark.Tolerations {
		tol := corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
		if !slices.Contains(pod.Tolerations, tol) {
			pod.Tolerations = append(pod.Tolerations, tol)
		}
	}
	return pod
}

// AIPerfJob is the recipe's benchmark Job for one point: AIPerf replaying the trace against the
// stack's own frontend (required pod affinity to the graph's frontend pods, whatever the graph's
// name), reading the trace from and writing its artifacts to the model cache claim.
func AIPerfJob(c *config.Config, namespace string, p BenchmarkPoint) batchv1.Job {
	b := c.Benchmark
	timeout, _ := time.ParseDuration(b.Timeout) // validated
	deadline := int64(timeout.Seconds())
	zero := int32(0)
	const configVolume = aiperfConfigVolume

	pod := benchmarkPodSpec(c)
	pod.RestartPolicy = corev1.RestartPolicyNever
	if pod.Affinity == nil {
		pod.Affinity = &corev1.Affinity{}
	}
	pod.Affinity.PodAffinity = &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "nvidia.com/dynamo-component-type", Operator: metav1.LabelSelectorOpIn, Values: []string{"frontend"}},
				{Key: "nvidia.com/dynamo-graph-deployment-name", Operator: metav1.LabelSelectorOpIn, Values: []string{c.GraphName}},
			}},
			TopologyKey: "kubernetes.io/hostname",
		}},
	}
	pod.Containers = []corev1.Container{{
		Name:            "aiperf",
		Image:           b.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/bin/bash", "-lc"},
		Args:            []string{AIPerfScript},
		// A failed point's error then carries the end of its log.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Env: []corev1.EnvVar{
			{Name: "TARGET_MODEL", Value: c.ServedModelName()},
			{Name: "TOKENIZER", Value: c.Model.Name},
			{Name: "HF_HOME", Value: config.BenchmarkMountPath},
			{Name: "HF_HUB_OFFLINE", Value: "1"},
			{Name: "TRANSFORMERS_OFFLINE", Value: "1"},
			{Name: "INFERENCE_URL", Value: fmt.Sprintf("http://%s:%d/v1/chat/completions", c.FrontendServiceName(), config.FrontendPort)},
			{Name: "TRACE_FILE", Value: path.Join(config.BenchmarkMountPath, b.TraceFile)},
			{Name: "CONCURRENCY", Value: fmt.Sprint(p.Concurrency)},
			{Name: "MAX_ISL", Value: fmt.Sprint(b.MaxISL)},
			{Name: "CAP_OSL", Value: fmt.Sprint(b.CapOSL)},
			{Name: "ARTIFACT_DIR", Value: p.ArtifactDir},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: configVolume, MountPath: "/etc/aiperf", ReadOnly: true},
			{Name: cacheVolumeName, MountPath: config.BenchmarkMountPath},
		},
	}}
	pod.Volumes = []corev1.Volume{
		{Name: configVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: AIPerfConfigMapName(c)}}}},
		{Name: cacheVolumeName, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ModelCache.ClaimName}}},
	}
	return batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: namespace, Labels: map[string]string{
			"app.kubernetes.io/component": "benchmark", "app.kubernetes.io/part-of": partOf,
			"minimax-m3.io/graph": c.GraphName, "minimax-m3.io/concurrency": fmt.Sprint(p.Concurrency),
		}},
		Spec: batchv1.JobSpec{
			BackoffLimit:          &zero,
			ActiveDeadlineSeconds: &deadline,
			Template:              corev1.PodTemplateSpec{Spec: pod},
		},
	}
}

// AIPerfWriteCheckScript is the recipe's artifact write check: the runtime user and group, then
// creating and deleting a file in ARTIFACT_DIR.
const AIPerfWriteCheckScript = `set -euo pipefail
id
mkdir -p "$ARTIFACT_DIR"
probe=$(mktemp "$ARTIFACT_DIR/.aiperf-write-check.XXXXXX")
printf 'write check\n' > "$probe"
rm "$probe"
echo "ARTIFACT_DIR is writable: $ARTIFACT_DIR"
`

// AIPerfWriteCheckJob is the recipe's write check as a Job: the benchmark Job's own image,
// environment, placement, security context and claim mount (not its ConfigMap), running
// AIPerfWriteCheckScript for artifactDir. A failure's termination message ends with the printed
// UID/GID and the error.
func AIPerfWriteCheckJob(c *config.Config, namespace, name, artifactDir string) batchv1.Job {
	job := AIPerfJob(c, namespace, BenchmarkPoint{Name: name, ArtifactDir: artifactDir})
	delete(job.Labels, "minimax-m3.io/concurrency")
	job.Labels["minimax-m3.io/benchmark-step"] = "write-check"
	pod := &job.Spec.Template.Spec
	container := &pod.Containers[0]
	container.Args = []string{AIPerfWriteCheckScript}
	container.VolumeMounts = slices.DeleteFunc(container.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == aiperfConfigVolume })
	pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == aiperfConfigVolume })
	return job
}

// BenchmarkHelperPod is the recipe's pvc-helper: a small pod mounting the model cache claim at
// /model-cache, which the sweep stages the trace through and copies the artifacts out of. It
// is placed like the benchmark Job, and stops at once when deleted.
func BenchmarkHelperPod(c *config.Config, namespace, name string) corev1.Pod {
	pod := benchmarkPodSpec(c)
	pod.RestartPolicy = corev1.RestartPolicyNever
	pod.Containers = []corev1.Container{{
		Name:            "helper",
		Image:           c.Benchmark.HelperImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 60 & wait $!; done"},
		VolumeMounts:    []corev1.VolumeMount{{Name: cacheVolumeName, MountPath: config.BenchmarkMountPath}},
	}}
	pod.Volumes = []corev1.Volume{{Name: cacheVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ModelCache.ClaimName}}}}
	return corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			"app.kubernetes.io/component": "benchmark", "app.kubernetes.io/part-of": partOf,
			"minimax-m3.io/graph": c.GraphName, "minimax-m3.io/benchmark-step": "helper",
		}},
		Spec: pod,
	}
}
