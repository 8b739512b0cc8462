package unit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"

	"minimax-m3/benchmark"
	"minimax-m3/components"
	"minimax-m3/config"
	"minimax-m3/manifest"
)

// recipePerf reads the recipe's perf/perf.yaml from $MINIMAX_M3_RECIPE (the Makefile points it at
// ../shared/reference/minimax-m3): its ConfigMap and its Job, as JSON-shaped values.
func recipePerf(t *testing.T) (configMap, job map[string]any) {
	t.Helper()
	dir := os.Getenv("MINIMAX_M3_RECIPE")
	require.NotEmpty(t, dir, "MINIMAX_M3_RECIPE must name the upstream recipe's folder (recipes/minimax-m3)")
	b, err := os.ReadFile(filepath.Join(dir, "perf", "perf.yaml"))
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		switch doc["kind"] {
		case "ConfigMap":
			configMap = doc
		case "Job":
			job = doc
		}
	}
	require.NotNil(t, configMap)
	require.NotNil(t, job)
	return configMap, job
}

// jsonShaped turns any value into maps, slices and scalars, without empty values (Kubernetes'
// types marshal empty structs the recipe's YAML leaves out).
func jsonShaped(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return prune(out)
}

func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e = prune(e); e == nil {
				delete(x, k)
			} else {
				x[k] = e
			}
		}
		if len(x) == 0 {
			return nil
		}
	case []any:
		if len(x) == 0 {
			return nil
		}
		for i := range x {
			x[i] = prune(x[i])
		}
	}
	return v
}

func disaggConfig(t *testing.T, values map[string]string) config.Config {
	t.Helper()
	raw := config.Raw{Values: map[string]string{"profile": "disagg", "namespace": `{"name":"inference"}`, "hfToken": testToken}, Secrets: map[string]bool{"hfToken": true}}
	for k, v := range values {
		raw.Values[k] = v
	}
	c, err := config.Parse(raw)
	require.NoError(t, err)
	return c
}

func TestAIPerfConfigIsTheRecipes(t *testing.T) {
	recipeCM, _ := recipePerf(t)
	c := disaggConfig(t, nil)
	perf, err := manifest.AIPerfConfig(&c)
	require.NoError(t, err)
	var got, want any
	require.NoError(t, yaml.Unmarshal([]byte(perf), &got))
	require.NoError(t, yaml.Unmarshal([]byte(recipeCM["data"].(map[string]any)["perf.yaml"].(string)), &want))
	assert.Equal(t, jsonShaped(t, want), jsonShaped(t, got), "every field of the recipe's perf.yaml")
}

func TestAIPerfJobIsTheRecipes(t *testing.T) {
	_, recipeJob := recipePerf(t)
	c := disaggConfig(t, nil)
	job := benchmark.AIPerfJob(&c, "", benchmark.JobPoint{
		Name: "minimax-m3-disagg-gb200-agentic-bench", Concurrency: 64, ArtifactDir: "/model-cache/aiperf-artifacts",
	})
	got := jsonShaped(t, job).(map[string]any)
	want := jsonShaped(t, recipeJob).(map[string]any)

	// What differs, on purpose: the Job's labels (which graph and point it measures, its pods' too), and the
	// ConfigMap's name, which follows the graph so two stacks in a namespace do not share it.
	assert.Equal(t, map[string]any{"app.kubernetes.io/component": "benchmark", "app.kubernetes.io/part-of": "minimax-m3",
		"minimax-m3.io/graph": "minimax-m3-disagg-gb200-agentic", "minimax-m3.io/concurrency": "64"}, got["metadata"].(map[string]any)["labels"])
	delete(got["metadata"].(map[string]any), "labels")
	// Its pods carry the graph's client label, which the graph's NetworkPolicy admits.
	template := got["spec"].(map[string]any)["template"].(map[string]any)
	assert.Equal(t, map[string]any{"labels": map[string]any{"minimax-m3.io/graph": "minimax-m3-disagg-gb200-agentic"}}, template["metadata"])
	delete(template, "metadata")
	volumes := got["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["volumes"].([]any)
	cm := volumes[0].(map[string]any)["configMap"].(map[string]any)
	assert.Equal(t, "minimax-m3-disagg-gb200-agentic-aiperf-config", cm["name"])
	cm["name"] = "minimax-m3-aiperf-config"
	// A failed point's error carries the end of its log.
	container := got["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	assert.Equal(t, "FallbackToLogsOnError", container["terminationMessagePolicy"])
	delete(container, "terminationMessagePolicy")
	// The recipe's YAML script block is the same text.
	assert.Equal(t, want, got, "every other field of the recipe's Job")
}

func TestAIPerfJobFollowsTheStack(t *testing.T) {
	c := disaggConfig(t, map[string]string{
		"graphName":        "team-a",
		"imagePullSecrets": `["ngc"]`,
		"modelCache":       `{"claimName": "cache-b"}`,
		"benchmark":        `{"maxISL": 65536, "traceFile": "traces/mine.jsonl"}`,
	})
	job := benchmark.AIPerfJob(&c, "inference", benchmark.JobPoint{Name: "team-a-bench-c16", Concurrency: 16, ArtifactDir: "/model-cache/aiperf-artifacts/run-1/c16"})
	pod := job.Spec.Template.Spec
	assert.Equal(t, []string{"team-a"}, pod.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchExpressions[1].Values,
		"the stack's own frontend, no hard-coded graph name")
	assert.Equal(t, "ngc", pod.ImagePullSecrets[0].Name)
	assert.Equal(t, "cache-b", pod.Volumes[1].PersistentVolumeClaim.ClaimName)
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "http://team-a-frontend:8000/v1/chat/completions", env["INFERENCE_URL"])
	assert.Equal(t, "/model-cache/traces/mine.jsonl", env["TRACE_FILE"])
	assert.Equal(t, "65536", env["MAX_ISL"])
	assert.Equal(t, "16", env["CONCURRENCY"])
	assert.Equal(t, "/model-cache/aiperf-artifacts/run-1/c16", env["ARTIFACT_DIR"])
}

// The benchmark's pods land where the frontend they measure runs: its node selector, tolerations
// and required node labels, plus benchmark.tolerations (each once). Without the frontend's node
// selector, the AIPerf Job's required affinity to the frontend's node could never be met where the
// frontend runs on a tainted pool.
func TestBenchmarkPodsArePlacedLikeTheFrontend(t *testing.T) {
	c := disaggConfig(t, map[string]string{
		"frontend": `{"scheduling": {"nodeSelector": {"pool": "cpu"}, "requiredNodeLabels": {"zone": ["a"]},
			"tolerations": [{"key": "cpu-only", "operator": "Exists", "effect": "NoSchedule"}, {"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"}]}}`,
	})
	job := benchmark.AIPerfJob(&c, "inference", benchmark.JobPoint{Name: "x", ArtifactDir: "/model-cache/a"}).Spec.Template.Spec
	helper := benchmark.HelperPod(&c, "inference", "helper").Spec
	for name, pod := range map[string]corev1.PodSpec{"aiperf": job, "helper": helper} {
		assert.Equal(t, map[string]string{"pool": "cpu"}, pod.NodeSelector, name)
		require.NotNil(t, pod.Affinity, name)
		require.NotNil(t, pod.Affinity.NodeAffinity, name)
		assert.Equal(t, "zone", pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key, name)
		var keys []string
		for _, tol := range pod.Tolerations {
			keys = append(keys, tol.Key)
		}
		assert.Equal(t, []string{"cpu-only", "kubernetes.io/arch"}, keys, "%s: the frontend's, and the benchmark's arm64 toleration once", name)
	}
	require.NotNil(t, job.Affinity.PodAffinity, "still beside the frontend")
}

// A benchmark stack creates the AIPerf ConfigMap beside its graph, and labels the graph.
func TestBenchmarkStackCreatesTheAIPerfConfigMap(t *testing.T) {
	r := mustRun(t, "disagg", map[string]string{"minimax-m3:benchmark": `{"enabled": true}`})
	cm := r.named(t, "kubernetes:core/v1:ConfigMap", "aiperf-config")
	assert.Equal(t, "minimax-m3-disagg-gb200-agentic-aiperf-config", decode[string](t, cm, "metadata", "name"))
	assert.Contains(t, decode[map[string]string](t, cm, "data")["perf.yaml"], "format: mooncake_trace")
	assert.Equal(t, "true", decode[map[string]string](t, r.customResource(t, "DynamoGraphDeployment"), "metadata", "labels")[components.BenchmarkLabel])

	_, err := run(t, "disagg", map[string]string{"minimax-m3:benchmark": `{"enabled": true, "traceSHA256": "abc", "timeout": "later"}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:benchmark.traceSHA256")
	assert.Contains(t, err.Error(), "minimax-m3:benchmark.timeout")
}

// The recipe's write check: the Job's own image, environment, placement and security context and
// the claim mount, without the benchmark ConfigMap.
func TestAIPerfWriteCheckIsTheBenchmarkJobsPod(t *testing.T) {
	c := disaggConfig(t, nil)
	check := benchmark.AIPerfWriteCheckJob(&c, "inference", "graph-bench-write-check", "/model-cache/aiperf-artifacts/run-1")
	job := benchmark.AIPerfJob(&c, "inference", benchmark.JobPoint{Name: "x", ArtifactDir: "/model-cache/aiperf-artifacts/run-1"})
	got, want := check.Spec.Template.Spec, job.Spec.Template.Spec
	assert.Equal(t, want.Containers[0].Image, got.Containers[0].Image)
	assert.Equal(t, want.Containers[0].Env, got.Containers[0].Env)
	assert.Equal(t, want.Affinity, got.Affinity)
	assert.Equal(t, want.Tolerations, got.Tolerations)
	assert.Equal(t, want.SecurityContext, got.SecurityContext)
	assert.Equal(t, want.Containers[0].SecurityContext, got.Containers[0].SecurityContext)
	assert.Equal(t, []corev1.VolumeMount{{Name: "shared-model-cache", MountPath: "/model-cache"}}, got.Containers[0].VolumeMounts)
	require.Len(t, got.Volumes, 1)
	assert.Equal(t, "shared-model-cache", got.Volumes[0].PersistentVolumeClaim.ClaimName)
	assert.Contains(t, got.Containers[0].Args[0], `probe=$(mktemp "$ARTIFACT_DIR/.aiperf-write-check.XXXXXX")`)
	assert.Equal(t, "write-check", check.Labels["minimax-m3.io/benchmark-step"])
	assert.Equal(t, int32(0), *check.Spec.BackoffLimit)
	assert.Len(t, job.Spec.Template.Spec.Volumes, 2, "the benchmark Job keeps its ConfigMap")
}
