package integration

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcluster "minimax-m3/internal/cluster"
	"minimax-m3/internal/objwatch"
	"minimax-m3/tests/framework/poll"
	"minimax-m3/tests/framework/rackbox"
)

// A second kubeconfig context for the same cluster (its own cluster entry, the same server): with
// the stack's fixed cluster identifier, switching to it replaces nothing. Changing the identifier
// is how a stack moves to another cluster, and that replaces everything.
func TestBoxSwitchingToAnotherContextOfTheSameClusterReplacesNothing(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	kc, err := clientcmd.LoadFromFile(rackBox(t).Kubeconfig)
	require.NoError(t, err)
	current := kc.Contexts[kc.CurrentContext]
	kc.Clusters["same-cluster-other-entry"] = kc.Clusters[current.Cluster].DeepCopy()
	second := current.DeepCopy()
	second.Cluster = "same-cluster-other-entry"
	kc.Contexts["second"] = second
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))

	s := newBoxStackOn(t, path, "agg", "box-context-switch", addRack(t, rackbox.NVL72("context").WithGPUs(12)), nil)
	upOK(t, s)

	s.set(ctx, "minimax-m3:kubernetes.context", "second")
	ops, err := s.preview(ctx)
	require.NoError(t, err, s.log.String())
	assert.Empty(t, ops, "no resource is replaced or changed")
	upOK(t, s)
	_, err = s.preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err)

	s.set(ctx, "minimax-m3:kubernetes.clusterIdentifier", "another-cluster")
	ops, err = s.preview(ctx)
	require.NoError(t, err, s.log.String())
	assert.Contains(t, opsOf(ops)["kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph"], "replace", "a new cluster identifier replaces the stack's objects")
}

// `up` waits for a Ready condition whose generation has caught up with the one it wrote: the
// condition's observedGeneration, else status.observedGeneration. With neither, there is nothing to
// compare, and `up` does not take the old Ready (the provider's own wait would take it at once):
// it waits out its budget and says what the operator last reported.
//
// Played on the plain API server, on purpose: the Dynamo operator this project runs writes both
// generations (every box test waits on them), so the status shapes tested here, an operator that
// writes only status.observedGeneration or none, are states the real operator cannot reach. They
// are what an older or patched operator writes.
func TestUpWaitsForTheOperatorToObserveTheNewGeneration(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	s := newStack(t, "agg", "observed-generation", nil)
	// The test plays an operator that writes the generation only in status.observedGeneration.
	upReady(t, s, controllers{})

	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "128")
	done := make(chan error, 1)
	go func() { _, _, err := s.up(ctx); done <- err }()
	// The gate: up has written generation 2 and waits for it, with the old Ready in place.
	err := poll.True(ctx, time.Minute, 100*time.Millisecond, "up waits for the graph's generation 2", func() bool {
		return strings.Contains(s.log.String(), "waiting for DynamoGraphDeployment observed-generation/"+aggGraph+" to be Ready at generation 2")
	})
	require.NoError(t, err, s.log.String())
	select {
	case err := <-done:
		t.Fatalf("up returned on the old generation's Ready: %v", err)
	case <-time.After(2 * time.Second):
	}
	stop := playControllers(t, cluster.client, s.ns, controllers{graphReady: true})
	select {
	case err := <-done:
		require.NoError(t, err, s.log.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("up did not return once the operator observed the new generation")
	}
	stop()

	// Neither generation written: the old Ready is not taken; up waits out its budget (10 s for
	// each of the rollout's 3 rounds) and names the condition it saw.
	g := mustGet(t, graphGVK, s.ns, aggGraph)
	require.NoError(t, cluster.client.Status().Patch(ctx, g, client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":null}}`))))
	s.set(ctx, "minimax-m3:readiness.timeout", "10s")
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "64")
	_, _, err = s.up(ctx)
	require.Error(t, err, "up took a Ready that names no generation")
	assert.Contains(t, err.Error(), "was not Ready at generation 3 within 30s (readiness.timeout, 10s, for each round of the rollout); the operator's Ready condition: True, AllComponentsReady: ")
	g = mustGet(t, graphGVK, s.ns, aggGraph)
	assert.Equal(t, int64(3), g.GetGeneration())
	_, observed, _ := unstructured.NestedInt64(g.Object, "status", "observedGeneration")
	assert.False(t, observed, "no one observed generation 3")
}

// watchRestart watches the graph's status.restart as the operator writes it (a watch sees every
// write, however short a phase); the function it returns waits for the phase Completed and gives
// the components in progress, each set once, in order.
func watchRestart(t *testing.T, ns, name string) func() [][]string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(box.Config)
	require.NoError(t, err)
	graphs := dyn.Resource(kcluster.GraphResource).Namespace(ns)
	var seen [][]string
	synced, done := make(chan struct{}), make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	go func() {
		_, err := objwatch.Until(ctx, objwatch.ByName(name, graphs.List, graphs.Watch), &unstructured.Unstructured{}, func(cache.Store) (bool, error) {
			close(synced) // listed: every later write is seen
			return false, nil
		}, func(e watch.Event) (bool, error) {
			g, ok := e.Object.(*unstructured.Unstructured)
			if !ok {
				return false, nil
			}
			inProgress, _, _ := unstructured.NestedStringSlice(g.Object, "status", "restart", "inProgress")
			if len(inProgress) > 0 && (len(seen) == 0 || !slices.Equal(seen[len(seen)-1], inProgress)) {
				seen = append(seen, inProgress)
			}
			phase, _, _ := unstructured.NestedString(g.Object, "status", "restart", "phase")
			return phase == "Completed", nil
		})
		done <- err
	}()
	select {
	case <-synced:
	case err := <-done:
		require.NoError(t, err, "watching the graph")
	}
	return func() [][]string {
		if err := <-done; err != nil {
			t.Errorf("no Completed restart seen (%v); seen %v", err, seen)
		}
		return seen
	}
}

// Every derived value follows what it is derived from, in the live objects.
func TestBoxDerivedValuesFollowTheirSourceInTheLiveGraph(t *testing.T) {
	parallelOnBox(t)
	s := newBoxStack(t, "disagg", "box-derived", addRack(t, rackbox.NVL72("derived").WithGPUs(24)), auto.ConfigMap{
		"minimax-m3:modelCache.mountPath": {Value: "/models"},
		"minimax-m3:model.name":           {Value: "acme/MiniMax-M3-FT"},
	})
	upOK(t, s)
	spec := liveGraphSpecOn(t, box.Client, s.ns, disaggGraph)
	frontend := spec.Components[0].PodTemplate.Spec.Containers[0].Args
	assert.Equal(t, []string{"--model-name", "acme/MiniMax-M3-FT", "--trust-remote-code"}, frontend[len(frontend)-3:])
	for _, c := range spec.Components[1:] {
		env := map[string]string{}
		for _, e := range c.PodTemplate.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		assert.True(t, strings.HasPrefix(env["FLASHINFER_WORKSPACE_BASE"], "/models/flashinfer-workspaces/"), c.Name)
		assert.Equal(t, "/models", env["HF_HOME"], c.Name)
		assert.Equal(t, "acme/MiniMax-M3-FT", env["SERVED_MODEL_NAME"], c.Name)
		assert.Equal(t, "/models", c.PodTemplate.Spec.Containers[0].VolumeMounts[0].MountPath, c.Name)
	}
	job := mustGetOn(t, box.Client, jobGVK, s.ns, "minimax-m3-model-download")
	mounts, _, _ := unstructured.NestedSlice(job.Object, "spec", "template", "spec", "containers")
	assert.Contains(t, toJSON(t, mounts), `"mountPath":"/models"`)
	assert.Contains(t, toJSON(t, mounts), "hf download acme/MiniMax-M3-FT")
}
