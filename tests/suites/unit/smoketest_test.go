package unit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"minimax-m3/components"
)

// smokeOn turns the smoke test back on (siteConfig turns it off for the other tests).
func smokeOn(extra map[string]string) map[string]string {
	out := map[string]string{"minimax-m3:smokeTest": ""}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func smokeJob(t *testing.T, r *result) recorded {
	t.Helper()
	return r.named(t, "kubernetes:batch/v1:Job", "smoke-test")
}

func TestSmokeTestJobRunsTheRecipesRequestsAfterTheGraph(t *testing.T) {
	r := mustRun(t, "disagg", smokeOn(map[string]string{
		"minimax-m3:imagePullSecrets": `["ngc"]`,
		"minimax-m3:frontend":         `{"scheduling": {"nodeSelector": {"pool": "cpu"}, "tolerations": [{"key": "cpu-only", "operator": "Exists", "effect": "NoSchedule"}]}}`,
	}))
	job := smokeJob(t, r)
	name := decode[string](t, job, "metadata", "name")
	assert.Regexp(t, `^minimax-m3-disagg-gb200-agentic-smoke-[0-9a-f]{8}$`, name)
	assert.Equal(t, "disagg", decode[map[string]string](t, job, "metadata", "labels")["app.kubernetes.io/instance"])

	spec := decode[batchv1.JobSpec](t, job, "spec")
	assert.Equal(t, int32(0), *spec.BackoffLimit, "one try")
	assert.Equal(t, int64(600), *spec.ActiveDeadlineSeconds, "smokeTest.timeout, 10m by default")
	pod := spec.Template.Spec
	assert.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
	assert.Equal(t, map[string]string{"pool": "cpu"}, pod.NodeSelector, "placed like the frontend")
	require.Len(t, pod.Tolerations, 1)
	assert.Equal(t, "cpu-only", pod.Tolerations[0].Key)
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "ngc"}}, pod.ImagePullSecrets)
	c := pod.Containers[0]
	assert.Equal(t, "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.0-minimax-m3-dev.1", c.Image, "the frontend's image by default")
	assert.Equal(t, []string{"python3", "-c", components.SmokeTestScript}, c.Command)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, map[string]string{
		"SMOKE_TEST_URL":        "http://minimax-m3-disagg-gb200-agentic-frontend:8000",
		"SMOKE_TEST_MODEL":      "nvidia/MiniMax-M3-NVFP4",
		"SMOKE_TEST_MESSAGE":    "Respond with a short readiness message.",
		"SMOKE_TEST_MAX_TOKENS": "64",
		// smokeTest.timeout 10m less a 30 s margin: a failure still writes its result.
		"SMOKE_TEST_BUDGET_SECONDS": "570",
	}, env)

	// After the graph: it depends on the DynamoGraphDeployment itself, whose Ready `up` awaits.
	assert.Contains(t, strings.Join(job.RPC.GetDependencies(), " "), "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment::graph")
	assert.Equal(t, "12m0s", job.RPC.GetCustomTimeouts().GetCreate(), "Kubernetes' deadline fires first")
	assert.Equal(t, map[string]string{"minimax-m3.io/stack": "organization/minimax-m3/disagg"}, decode[map[string]string](t, job, "metadata", "annotations"), "up waits for it")

	assert.Equal(t, map[string]any{"job": name, "passed": true}, r.outputs["smokeTest"])
}

func TestSmokeTestRunsAgainForANewGraphSpecOnly(t *testing.T) {
	// The graph exists (a restart needs one), and is this stack's.
	live := fakeCluster{"dynamographdeployments/inference/minimax-m3-agg-gb200-agentic": {
		"@minimax-m3.io/stack": "organization/minimax-m3/agg", "app.kubernetes.io/instance": "agg", "app.kubernetes.io/managed-by": "pulumi"}}
	name := func(extra map[string]string) string {
		r, err := runOn(t, live, "agg", smokeOn(extra))
		require.NoError(t, err)
		return decode[string](t, smokeJob(t, r), "metadata", "name")
	}
	base := name(nil)
	assert.NotEqual(t, base, name(map[string]string{"minimax-m3:worker": `{"vllm": {"maxNumSeqs": 32}}`}), "a vLLM flag is a new graph generation")
	assert.NotEqual(t, base, name(map[string]string{"minimax-m3:restart": `{"id": "r1"}`}), "so is a restart")
	assert.Equal(t, base, name(map[string]string{"minimax-m3:modelDownload": `{"timeout": "3h"}`}), "the download's settings are not the graph's")
	assert.Equal(t, base, name(map[string]string{"minimax-m3:readiness": `{"timeout": "3h"}`}))
}

func TestNoSmokeTestWithoutAReadinessWaitOrWhenOff(t *testing.T) {
	r := mustRun(t, "agg", smokeOn(map[string]string{"minimax-m3:readiness": `{"waitForReady": false}`}))
	assert.Len(t, r.byType("kubernetes:batch/v1:Job"), 1, "only the download Job")
	assert.NotContains(t, r.outputs, "smokeTest")

	_, err := run(t, "agg", smokeOn(map[string]string{
		"minimax-m3:smokeTest": `{"maxTokens": 0, "timeout": "soon"}`,
		"minimax-m3:graphName": "a-graph-name-that-is-long-enough-to-break-the-smoke-test-job",
	}))
	require.Error(t, err)
	for _, want := range []string{"minimax-m3:smokeTest.maxTokens", "minimax-m3:smokeTest.timeout", "minimax-m3:smokeTest.enabled: the smoke test Job's name"} {
		assert.Contains(t, err.Error(), want)
	}
}

// The script itself, against a frontend played by an HTTP server: python3 runs it as the Job's
// container does, with its result file in a temporary directory instead of /dev/termination-log,
// a 3 s budget and 50 ms between tries. The frontend may not list the model yet, or answer 404/503
// while workers register after Ready: the script waits for it within its budget.
func TestSmokeTestScript(t *testing.T) {
	t.Parallel()
	const served = `{"data":[{"id":"nvidia/MiniMax-M3-NVFP4"}]}`
	cases := []struct {
		name string
		// models and chat answer the n-th request (from 0) to their path.
		models    func(w http.ResponseWriter, n int)
		chat      func(w http.ResponseWriter, n int, body map[string]any)
		exit      int
		want      map[string]any
		chatCalls int
	}{
		{"a completion passes", listed, func(w http.ResponseWriter, _ int, body map[string]any) {
			_, _ = fmt.Fprintf(w, `{"choices":[{"message":{"content":"Ready to serve %s."}}]}`, body["model"])
		}, 0, map[string]any{"reply": "Ready to serve nvidia/MiniMax-M3-NVFP4.", "attempts": float64(1)}, 1},
		{"the model is listed late, the chat is routable late", func(w http.ResponseWriter, n int) {
			switch n {
			case 0:
				w.WriteHeader(http.StatusServiceUnavailable)
			case 1:
				_, _ = w.Write([]byte(`{"data":[]}`))
			default:
				_, _ = w.Write([]byte(served))
			}
		}, func(w http.ResponseWriter, n int, _ map[string]any) {
			if n < 2 {
				w.WriteHeader([]int{http.StatusNotFound, http.StatusServiceUnavailable}[n])
				return
			}
			_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}]}`))
		}, 0, map[string]any{"reply": "ok", "attempts": float64(3)}, 3},
		{"a frontend that stays unavailable fails at the budget with the last status and body", listed, func(w http.ResponseWriter, _ int, _ map[string]any) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"no workers"}`))
		}, 1, map[string]any{"status": float64(503), "body": `{"error":"no workers"}`}, -1},
		{"a bad request fails at once", listed, func(w http.ResponseWriter, _ int, _ map[string]any) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"max_tokens"}`))
		}, 1, map[string]any{"status": float64(400), "attempts": float64(1)}, 1},
		{"a model never listed fails naming it", func(w http.ResponseWriter, _ int) {
			_, _ = w.Write([]byte(`{"data":[{"id":"other"}]}`))
		}, nil, 1, map[string]any{"request": "GET /v1/models", "error": "the served model nvidia/MiniMax-M3-NVFP4 was not listed"}, 0},
		{"an empty completion fails", listed, func(w http.ResponseWriter, _ int, _ map[string]any) {
			_, _ = w.Write([]byte(`{"choices":[{"message":{"content":""}}]}`))
		}, 1, map[string]any{"error": "no completion in the response"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case runs the script against a server of its own; each waits on its retries
			var mu sync.Mutex
			var got map[string]any
			calls := map[string]int{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n := calls[r.URL.Path]
				calls[r.URL.Path]++
				mu.Unlock()
				switch r.URL.Path {
				case "/v1/models":
					tc.models(w, n)
				case "/v1/chat/completions":
					var body map[string]any
					if json.NewDecoder(r.Body).Decode(&body) != nil {
						w.WriteHeader(http.StatusBadRequest)
						return
					}
					mu.Lock()
					got = body
					mu.Unlock()
					tc.chat(w, n, body)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			out := filepath.Join(t.TempDir(), "result")
			cmd := exec.Command("python3", "-c", components.SmokeTestScript)
			cmd.Env = append(os.Environ(), "SMOKE_TEST_URL="+srv.URL, "SMOKE_TEST_MODEL=nvidia/MiniMax-M3-NVFP4",
				"SMOKE_TEST_MESSAGE=Respond with a short readiness message.", "SMOKE_TEST_MAX_TOKENS=64", "SMOKE_TEST_RESULT="+out,
				"SMOKE_TEST_BUDGET_SECONDS=3", "SMOKE_TEST_RETRY_SECONDS=0.05")
			b, err := cmd.CombinedOutput()
			code := 0
			if err != nil {
				exit, ok := err.(*exec.ExitError)
				require.True(t, ok, "%v: %s", err, b)
				code = exit.ExitCode()
			}
			assert.Equal(t, tc.exit, code, string(b))
			if tc.chatCalls != 0 {
				assert.Equal(t, map[string]any{"model": "nvidia/MiniMax-M3-NVFP4", "max_tokens": float64(64),
					"messages": []any{map[string]any{"role": "user", "content": "Respond with a short readiness message."}}}, got)
			}
			if tc.chatCalls > 0 {
				assert.Equal(t, tc.chatCalls, calls["/v1/chat/completions"])
			}
			if tc.chatCalls < 0 {
				assert.Greater(t, calls["/v1/chat/completions"], 2, "it retried 503 within its budget")
			}
			raw, err := os.ReadFile(out)
			require.NoError(t, err)
			var result map[string]any
			require.NoError(t, json.Unmarshal(raw, &result))
			for k, v := range tc.want {
				assert.Equal(t, v, result[k], k)
			}
			assert.Equal(t, tc.exit == 0, result["passed"])
		})
	}
}

// listed is a frontend that lists the served model.
func listed(w http.ResponseWriter, _ int) {
	_, _ = w.Write([]byte(`{"data":[{"id":"nvidia/MiniMax-M3-NVFP4"}]}`))
}
