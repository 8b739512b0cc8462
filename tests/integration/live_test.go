package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"minimax-m3/components"
	"minimax-m3/config"
)

var (
	namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	secretGVK    = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	configMapGVK = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	pvcGVK       = schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}
	jobGVK       = schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
)

type lifecycleCase struct {
	stack, graph string
	workers      []string
	gpus         float64
	// flagKey is a vLLM flag of the first worker role, changed in place.
	flagKey string
}

var lifecycleCases = []lifecycleCase{
	{stack: "agg", graph: "minimax-m3-agg-gb200-agentic", workers: []string{"Worker"}, gpus: 12, flagKey: "minimax-m3:worker.vllm.maxNumSeqs"},
	{stack: "disagg", graph: "minimax-m3-disagg-gb200-agentic", workers: []string{"PrefillWorker", "DecodeWorker"}, gpus: 24, flagKey: "minimax-m3:prefillWorker.vllm.maxNumSeqs"},
}

func liveGraphSpec(t *testing.T, ns, name string) components.DynamoGraphDeploymentSpec {
	t.Helper()
	g, ok := get(t, graphGVK, ns, name)
	require.True(t, ok, "graph %s/%s exists", ns, name)
	b, err := json.Marshal(g.Object["spec"])
	require.NoError(t, err)
	var spec components.DynamoGraphDeploymentSpec
	require.NoError(t, json.Unmarshal(b, &spec))
	return spec
}

func opsOf(ops []operation) map[string]string {
	out := map[string]string{}
	for _, o := range ops {
		out[o.Type+" "+o.Name] += o.Op + " "
	}
	for k, v := range out {
		out[k] = strings.TrimSpace(v)
	}
	return out
}

func TestStackLifecycleAgainstARealAPIServer(t *testing.T) {
	for _, tc := range lifecycleCases {
		t.Run(tc.stack, func(t *testing.T) {
			ctx := context.Background()
			ns := "life-" + tc.stack
			s := newStack(t, tc.stack, ns, nil)

			// 1. up: the graph is created only once the download Job has completed, and up returns
			// only once the graph is Ready. The test plays the Dynamo operator from the start and the
			// Job controller only once it has seen that the graph is held back.
			stopOperator := playControllers(t, ns, controllers{graphReady: true})
			type upResult struct {
				res auto.UpResult
				err error
			}
			done := make(chan upResult, 1)
			go func() {
				res, _, err := s.up(ctx)
				done <- upResult{res, err}
			}()
			require.Eventually(t, func() bool { _, ok := get(t, jobGVK, ns, "minimax-m3-model-download"); return ok },
				2*time.Minute, 200*time.Millisecond, "the download Job is created")
			time.Sleep(3 * time.Second)
			_, graphExists := get(t, graphGVK, ns, tc.graph)
			assert.False(t, graphExists, "the graph waits for the download Job")
			select {
			case r := <-done:
				t.Fatalf("up returned before the download completed: %v", r.err)
			default:
			}
			stopJobs := playControllers(t, ns, controllers{jobOutcome: "complete"})
			var r upResult
			select {
			case r = <-done:
			case <-time.After(3 * time.Minute):
				t.Fatal("up did not finish after the Job completed and the graph became Ready")
			}
			stopJobs()
			require.NoError(t, r.err, s.log.String())

			// Outputs
			out := r.res.Outputs
			assert.Equal(t, ns, out["namespace"].Value)
			assert.Equal(t, tc.graph, out["graphName"].Value)
			assert.Equal(t, tc.graph+"-frontend", out["frontendService"].Value)
			assert.EqualValues(t, 8000, out["frontendPort"].Value)
			assert.Equal(t, "http://"+tc.graph+"-frontend."+ns+".svc.cluster.local:8000", out["frontendUrl"].Value)
			assert.Equal(t, "kubectl -n "+ns+" port-forward service/"+tc.graph+"-frontend 8000:8000", out["portForwardCommand"].Value)
			assert.EqualValues(t, tc.gpus, out["gpuCount"].Value)
			assert.Equal(t, tc.graph+"-cd", out["computeDomain"].Value)
			assert.Equal(t, "shared-model-cache", out["cacheClaimName"].Value)

			// The live objects are the recipe's, validated by the real CRD schemas on the way in, and
			// nothing was pruned or rewritten: the live spec is exactly the recipe's spec.
			spec := liveGraphSpec(t, ns, tc.graph)
			recipe := config.Defaults(config.Profile(tc.stack))
			want, err := components.GraphSpec(&recipe)
			require.NoError(t, err)
			assert.JSONEq(t, toJSON(t, want), toJSON(t, spec))
			require.Len(t, spec.Components, 1+len(tc.workers))
			assert.Equal(t, "Frontend", spec.Components[0].Name)
			for i, w := range tc.workers {
				c := spec.Components[i+1]
				assert.Equal(t, w, c.Name)
				assert.Equal(t, 3, c.Replicas)
				assert.Equal(t, tc.graph+"-cd-channel", *c.PodTemplate.Spec.ResourceClaims[0].ResourceClaimTemplateName)
				gpus := c.PodTemplate.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
				assert.Equal(t, "4", gpus.String())
				assert.Equal(t, "speculative-config", c.PodTemplate.Spec.Containers[0].Env[1].ValueFrom.ConfigMapKeyRef.Key)
			}
			cm, ok := get(t, configMapGVK, ns, tc.graph+"-config")
			require.True(t, ok)
			data := cm.Object["data"].(map[string]any)
			assert.Contains(t, data["speculative-config"], `"num_speculative_tokens": 3`)
			assert.Contains(t, data["speculative-config-synthetic"], `"synthetic_acceptance_length": 2.89`)
			cd, ok := get(t, computeDomainGVK, ns, tc.graph+"-cd")
			require.True(t, ok)
			assert.Equal(t, map[string]any{"name": tc.graph + "-cd-channel"}, cd.Object["spec"].(map[string]any)["channel"].(map[string]any)["resourceClaimTemplate"])
			pvc, ok := get(t, pvcGVK, ns, "shared-model-cache")
			require.True(t, ok)
			assert.Equal(t, []any{"ReadWriteMany"}, pvc.Object["spec"].(map[string]any)["accessModes"])
			secret, ok := get(t, secretGVK, ns, "hf-token-secret")
			require.True(t, ok)
			assert.Contains(t, secret.Object["data"], "HF_TOKEN")

			// 2. A second up and a preview with --expect-no-changes change nothing.
			_, ops, err := s.up(ctx)
			require.NoError(t, err, s.log.String())
			assert.Empty(t, ops, "a second up changes nothing")
			_, err = s.preview(ctx, optpreview.ExpectNoChanges())
			require.NoError(t, err, "preview --expect-no-changes")

			// 3. A vLLM flag updates only the graph.
			s.set(ctx, tc.flagKey, "64")
			_, ops, err = s.up(ctx)
			require.NoError(t, err, s.log.String())
			assert.Equal(t, map[string]string{"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph": "update"}, opsOf(ops))
			assert.Contains(t, liveGraphSpec(t, ns, tc.graph).Components[1].PodTemplate.Spec.Containers[0].Args, "64")

			// 4. Synthetic acceptance changes only the workers' ConfigMap key, and says so loudly.
			s.set(ctx, "minimax-m3:speculativeDecoding.mode", "synthetic")
			_, ops, err = s.up(ctx)
			require.NoError(t, err, s.log.String())
			assert.Equal(t, map[string]string{"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph": "update"}, opsOf(ops))
			for _, c := range liveGraphSpec(t, ns, tc.graph).Components[1:] {
				assert.Equal(t, "speculative-config-synthetic", c.PodTemplate.Spec.Containers[0].Env[1].ValueFrom.ConfigMapKeyRef.Key)
			}
			assert.Contains(t, s.log.String(), "BENCHMARK ONLY")

			// 5. A new model revision replaces the download Job and updates the graph; the claim,
			// namespace and Secret stay.
			newRevision := "0123456789abcdef0123456789abcdef01234567"
			s.set(ctx, "minimax-m3:model.revision", newRevision)
			stopJobs = playControllers(t, ns, controllers{jobOutcome: "complete"})
			_, ops, err = s.up(ctx)
			stopJobs()
			require.NoError(t, err, s.log.String())
			changed := opsOf(ops)
			assert.Contains(t, changed["kubernetes:batch/v1:Job model-download"], "replace")
			assert.Equal(t, "update", changed["kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph"])
			for k := range changed {
				assert.NotRegexp(t, "Namespace|Secret|PersistentVolumeClaim|ConfigMap|ComputeDomain", k, "only the Job and the graph change")
			}
			assert.Contains(t, liveGraphSpec(t, ns, tc.graph).Components[1].PodTemplate.Spec.Containers[0].Args, newRevision)

			// 6. No plaintext token in the state, the outputs or the logs.
			state := s.export()
			assert.NotContains(t, state, testToken)
			assert.Contains(t, state, "ciphertext", "the token is encrypted in state")
			outputs, err := s.stack.Outputs(ctx)
			require.NoError(t, err)
			for k, v := range outputs {
				assert.NotContains(t, toJSON(t, v.Value), testToken, k)
			}
			assert.NotContains(t, s.log.String(), testToken)
			assert.NotContains(t, s.log.String(), "client-key-data")

			// 7. destroy removes what the stack created but keeps the model cache, and the namespace
			// that holds it.
			stopOperator()
			stopGC := playControllers(t, ns, controllers{})
			_, err = s.stack.Destroy(ctx)
			stopGC()
			require.NoError(t, err)
			for _, o := range []struct {
				gvk  schema.GroupVersionKind
				name string
			}{{graphGVK, tc.graph}, {computeDomainGVK, tc.graph + "-cd"}, {configMapGVK, tc.graph + "-config"}, {jobGVK, "minimax-m3-model-download"}, {secretGVK, "hf-token-secret"}} {
				_, exists := get(t, o.gvk, ns, o.name)
				assert.False(t, exists, "%s %s is deleted", o.gvk.Kind, o.name)
			}
			_, kept := get(t, pvcGVK, ns, "shared-model-cache")
			assert.True(t, kept, "destroy keeps the model cache")
			_, kept = get(t, namespaceGVK, "", ns)
			assert.True(t, kept, "destroy keeps the namespace holding the cache")
		})
	}
}

func toJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
