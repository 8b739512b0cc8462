package benchmark

import (
	"fmt"
	"path"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/components"
	"minimax-m3/config"
	"minimax-m3/manifest"
)

// cacheVolume is the benchmark pods' volume of the model cache claim (the graph's pods name theirs the same).
const cacheVolume = "shared-model-cache"

const aiperfConfigVolume = "aiperf-config"

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

// JobPoint is one concurrency point of a sweep as its AIPerf Job runs it.
type JobPoint struct {
	// Name is the Job's name; ArtifactDir its own directory on the claim.
	Name, ArtifactDir string
	Concurrency       int
}

// podSpec places the benchmark's pods like the frontend they measure: its scheduling
// (node selector, tolerations, required node labels, priority, runtime and scheduler), plus
// benchmark.tolerations, and the stack's pull secrets.
func podSpec(c *config.Config) corev1.PodSpec {
	pod := manifest.SitePodSpec(c.ImagePullSecrets, c.Frontend.Scheduling)
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
func AIPerfJob(c *config.Config, namespace string, p JobPoint) batchv1.Job {
	b := c.Benchmark
	timeout, _ := time.ParseDuration(b.Timeout) // validated
	deadline := int64(timeout.Seconds())
	zero := int32(0)
	const configVolume = aiperfConfigVolume

	pod := podSpec(c)
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
			{Name: cacheVolume, MountPath: config.BenchmarkMountPath},
		},
	}}
	pod.Volumes = []corev1.Volume{
		{Name: configVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: manifest.AIPerfConfigMapName(c)}}}},
		{Name: cacheVolume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ModelCache.ClaimName}}},
	}
	return batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: namespace, Labels: map[string]string{
			"app.kubernetes.io/component": "benchmark", "app.kubernetes.io/part-of": manifest.PartOf,
			"minimax-m3.io/graph": c.GraphName, "minimax-m3.io/concurrency": fmt.Sprint(p.Concurrency),
		}},
		Spec: batchv1.JobSpec{
			BackoffLimit:          &zero,
			ActiveDeadlineSeconds: &deadline,
			// The graph's NetworkPolicy admits the stack's clients by this label.
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{components.ClientLabel: c.GraphName}}, Spec: pod},
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
	job := AIPerfJob(c, namespace, JobPoint{Name: name, ArtifactDir: artifactDir})
	delete(job.Labels, "minimax-m3.io/concurrency")
	job.Labels["minimax-m3.io/benchmark-step"] = "write-check"
	pod := &job.Spec.Template.Spec
	container := &pod.Containers[0]
	container.Args = []string{AIPerfWriteCheckScript}
	container.VolumeMounts = slices.DeleteFunc(container.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == aiperfConfigVolume })
	pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == aiperfConfigVolume })
	return job
}

// HelperPod is the recipe's pvc-helper: a small pod mounting the model cache claim at
// /model-cache, which the sweep stages the trace through and copies the artifacts out of. It
// is placed like the benchmark Job, and stops at once when deleted.
func HelperPod(c *config.Config, namespace, name string) corev1.Pod {
	pod := podSpec(c)
	pod.RestartPolicy = corev1.RestartPolicyNever
	pod.Containers = []corev1.Container{{
		Name:            "helper",
		Image:           c.Benchmark.HelperImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 60 & wait $!; done"},
		VolumeMounts:    []corev1.VolumeMount{{Name: cacheVolume, MountPath: config.BenchmarkMountPath}},
	}}
	pod.Volumes = []corev1.Volume{{Name: cacheVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ModelCache.ClaimName}}}}
	return corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			"app.kubernetes.io/component": "benchmark", "app.kubernetes.io/part-of": manifest.PartOf,
			components.ClientLabel: c.GraphName, "minimax-m3.io/benchmark-step": "helper",
		}},
		Spec: pod,
	}
}
