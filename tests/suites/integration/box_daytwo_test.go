package integration

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/framework/rackbox"
)

// Day-two changes in the rack box (what runs for real and what is played: box_test.go and
// docs/development.md).

// The recipe deployed the recipe's way (its README's `kubectl apply`, client-side, so every field
// is owned by kubectl-client-side-apply) and brought to Ready by the real operator; then adopted
// (adopt=true with the recipe's rollout, worker.rollout.strategy OperatorDefault: the adopted spec
// is the recipe's, so no new generation and no restart; the program's default one-at-a-time
// rollout is part of the workers' template and would roll them once), then changed: the image, a vLLM flag and the
// speculative ConfigMap in one update, the worker count in the next. Each change of a field kubectl
// wrote applies (the adopted objects take kubectl's fields over instead of failing with a
// conflict), rolls through the real operator and ends Ready at the new generation.
func TestBoxAdoptingAKubectlAppliedRecipeThenChangingIt(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	// The recipe's pods tolerate no arm64 taint: a GB200 pool without it, with a spare tray for
	// the operator's default 25% surge, which the recipe-exact rollout keeps.
	r := rackbox.NVL72("adopt").WithGPUs(16)
	r.Taints = slices.DeleteFunc(slices.Clone(r.Taints), func(t corev1.Taint) bool { return t.Key == corev1.LabelArchStable })
	addRack(t, r)
	ns := "box-adopt"

	boxKubectl(t, "", "create", "namespace", ns)
	boxKubectl(t, "", "-n", ns, "create", "secret", "generic", "hf-token-secret", "--from-literal=HF_TOKEN=hf_brought_by_the_user")
	cache, err := os.ReadFile(filepath.Join(recipeDir(t), "model-cache", "model-cache.yaml"))
	require.NoError(t, err)
	boxKubectl(t, strings.ReplaceAll(string(cache), "your-storage-class-name", rackbox.StorageClass), "-n", ns, "apply", "-f", "-")
	boxKubectl(t, "", "-n", ns, "apply", "-f", filepath.Join(recipeDir(t), "vllm", "agg-gb200-agentic", "deploy.yaml"))
	eventually(t, 3*time.Minute, "the operator brings the recipe's graph to Ready", func(ctx context.Context) (bool, error) {
		g, _, err := tryGetOn(ctx, box.Client, graphGVK, ns, aggGraph)
		return g != nil && operatorReady(g), err
	})
	live := boxGraph(t, ns, aggGraph)
	generation, uid := live.GetGeneration(), live.GetUID()
	var managers []string
	for _, m := range live.GetManagedFields() {
		managers = append(managers, m.Manager)
	}
	require.Contains(t, managers, "kubectl-client-side-apply", "the recipe's way of applying")

	s := makeStack(t, box.Kubeconfig, "agg", ns, auto.ConfigMap{
		"minimax-m3:namespace.create":           {Value: "false"},
		"minimax-m3:huggingFace.existingSecret": {Value: "true"},
		"minimax-m3:modelDownload.enabled":      {Value: "false"},
		"minimax-m3:modelCache.storageClass":    {Value: rackbox.StorageClass},
		"minimax-m3:worker.rollout.strategy":    {Value: "OperatorDefault"},
		// The recipe's workers tolerate no taint (the default tolerates a stock pool's GPU and
		// arm64 taints): the recipe-exact form, like the rollout above.
		"minimax-m3:worker.scheduling.tolerations": {Value: "[]"},
		// The recipe keeps the operator's startup probe (the default outlasts the engine's timeout).
		"minimax-m3:worker.probes.startup": {Value: "null"},
		"minimax-m3:adopt":                 {Value: "true"},
	}, nil)
	require.NoError(t, s.stack.RemoveConfig(ctx, "minimax-m3:hfToken"))
	_, _, err = s.up(ctx)
	require.NoError(t, err, s.log.String())
	live = boxGraph(t, ns, aggGraph)
	assert.Equal(t, uid, live.GetUID(), "the same graph")
	assert.Equal(t, generation, live.GetGeneration(), "adoption restarts nothing")
	// The stack and the cluster agree: a refreshed preview (the PR check's) proposes nothing.
	_, err = s.preview(ctx, optpreview.ExpectNoChanges(), optpreview.Refresh(), optpreview.Diff())
	require.NoError(t, err, "after adoption, a refreshed preview shows no diff\n%s", s.log.String())
	// Without --refresh the preview compares the new inputs with the copy of the graph the state
	// recorded. The provider's await (v4.25.0, await/condition/observer.go) keeps any observed
	// copy that is not of an older generation, and adoption changes only the graph's metadata
	// (same generation): under load its informer can still serve the copy from before the patch,
	// which is then recorded, and the next preview proposes the metadata again (no change to the
	// cluster; the next up or refresh records the live graph). That case is told apart here from
	// an inputs/cluster mismatch of the program's, which the refreshed preview above would show.
	if _, err := s.preview(ctx, optpreview.ExpectNoChanges(), optpreview.Diff()); err != nil {
		recorded := s.stored("kubernetes:nvidia.com/v1alpha1:DynamoGraphDeployment")
		require.NotEqual(t, boxGraph(t, ns, aggGraph).GetResourceVersion(), recorded.GetResourceVersion(),
			"a preview proposed changes although the state holds the live graph\n%s", s.log.String())
		require.Empty(t, recorded.GetAnnotations()["minimax-m3.io/stack"], "the recorded graph is the one from before the adoption; else the proposed change is unexplained\n%s", s.log.String())
		t.Logf("the provider recorded the graph from before the adoption's patch (resourceVersion %s); the preview proposed its metadata again", recorded.GetResourceVersion())
	}

	const image = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.0-minimax-m3-dev.2"
	s.set(ctx, "minimax-m3:image", image)
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "48")
	s.set(ctx, "minimax-m3:speculativeDecoding.numSpeculativeTokens", "2")
	_, _, err = s.up(ctx)
	require.NoError(t, err, "a change of fields kubectl applied\n%s", s.log.String())
	live = boxGraph(t, ns, aggGraph)
	assert.Greater(t, live.GetGeneration(), generation)
	assert.True(t, operatorReady(live), "up returned once the operator was Ready at the new generation")
	workers := client.MatchingLabels{graphLabelKey: aggGraph, "nvidia.com/dynamo-component": "Worker"}
	pods := podsOf(t, ns, workers)
	require.Len(t, pods, 3)
	for _, p := range pods {
		assert.Equal(t, image, p.Spec.Containers[0].Image)
		assert.Contains(t, strings.Join(p.Spec.Containers[0].Args, " "), "--max-num-seqs 48")
	}
	cm := &corev1.ConfigMap{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph + "-config"}, cm))
	assert.Contains(t, strings.Join(slices.Collect(maps.Values(cm.Data)), "\n"), `"num_speculative_tokens": 2`, "the adopted ConfigMap changed")

	s.set(ctx, "minimax-m3:worker.replicas", "2")
	_, _, err = s.up(ctx)
	require.NoError(t, err, "a change of the replicas kubectl applied\n%s", s.log.String())
	eventually(t, time.Minute, "two workers", func(ctx context.Context) (bool, error) {
		pods, err := listPods(ctx, ns, workers)
		return err == nil && len(pods) == 2, err
	})
}

// One stack owns the namespace, the cache, the token Secret and the download; a second stack in the
// namespace (on another rack) uses them, cannot take or delete them, and is told which keys to set
// when it tries to create them. Destroying it leaves the owner's stack intact and Ready.
func TestBoxTwoStacksShareANamespaceAndOneCache(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-shared"
	owner := newBoxStack(t, "agg", ns, addRack(t, rackbox.NVL72("shared-agg").WithGPUs(12)), nil)
	_, _, err := owner.up(ctx)
	require.NoError(t, err, owner.log.String())

	user := newBoxStack(t, "disagg", ns, addRack(t, rackbox.NVL72("shared-disagg").WithGPUs(24)), nil)
	_, err = user.preview(ctx)
	require.Error(t, err, "the second stack may not take over the first one's objects")
	msg := err.Error() + user.log.String()
	for _, want := range []string{
		`minimax-m3:namespace.create: Namespace box-shared already exists and belongs to stack "organization/minimax-m3/agg"`,
		`minimax-m3:huggingFace.existingSecret: Secret box-shared/hf-token-secret already exists and belongs to stack "organization/minimax-m3/agg"`,
		`minimax-m3:modelCache.create: PersistentVolumeClaim box-shared/shared-model-cache already exists and belongs to stack "organization/minimax-m3/agg"`,
		`minimax-m3:modelDownload.enabled: Job box-shared/minimax-m3-model-download already exists and belongs to stack "organization/minimax-m3/agg"`,
	} {
		assert.Contains(t, msg, want)
	}

	// The second-stack settings of docs/day-two.md.
	for k, v := range map[string]string{"minimax-m3:namespace.create": "false", "minimax-m3:modelCache.create": "false", "minimax-m3:modelDownload.enabled": "false"} {
		user.set(ctx, k, v)
	}
	require.NoError(t, user.stack.RemoveConfig(ctx, "minimax-m3:hfToken"))
	_, ops, err := user.up(ctx)
	require.NoError(t, err, user.log.String())
	for k := range opsOf(ops) {
		assert.NotRegexp(t, "^kubernetes:.*(Namespace|Secret|PersistentVolumeClaim|Job) (namespace|hf-token|model-cache|model-download)$", k, "the second stack creates none of the owner's objects")
	}
	assert.True(t, operatorReady(boxGraph(t, ns, disaggGraph)), "the second graph is Ready on the shared cache")

	// kubectl get -l app.kubernetes.io/instance=<stack> tells the stacks apart.
	for stack, graph := range map[string]string{"agg": aggGraph, "disagg": disaggGraph} {
		var graphs unstructured.UnstructuredList
		graphs.SetGroupVersionKind(graphGVK.GroupVersion().WithKind("DynamoGraphDeploymentList"))
		require.NoError(t, box.Client.List(ctx, &graphs, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/instance": stack}))
		require.Len(t, graphs.Items, 1)
		assert.Equal(t, graph, graphs.Items[0].GetName())
	}

	_, err = user.stack.Destroy(ctx)
	require.NoError(t, err, user.log.String())
	eventually(t, time.Minute, "the second graph is gone", func(ctx context.Context) (bool, error) {
		g, _, err := tryGetOn(ctx, box.Client, graphGVK, ns, disaggGraph)
		return err == nil && g == nil, err // NotFound, and nothing else
	})
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hf-token-secret"}, &corev1.Secret{}), "the owner's Secret is kept")
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared-model-cache"}, &corev1.PersistentVolumeClaim{}), "the owner's claim is kept")
	assert.True(t, operatorReady(boxGraph(t, ns, aggGraph)), "the owner's graph is still Ready")
	_, err = owner.preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "the owner's stack is intact\n%s", owner.log.String())
}

// Renaming the graph on a full rack replaces what its name names (the graph, its ConfigMap and
// ComputeDomain) and nothing else: the old graph goes first (its GPUs free), so the new one becomes
// Ready on the same rack; the cache, its download, the Secret and the namespace are untouched.
func TestBoxRenamingTheGraphOnAFullRack(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-graph-rename"
	s := readyBoxStack(t, "agg", ns, rackbox.NVL72("graph-rename").WithGPUs(12), nil)
	var err error
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared-model-cache"}, pvc))

	s.set(ctx, "minimax-m3:graphName", "mm3-renamed")
	ops, err := s.preview(ctx)
	require.NoError(t, err, s.log.String())
	changed := opsOf(ops)
	for _, k := range []string{"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph", "kubernetes:core/v1:ConfigMap speculative-config", "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain compute-domain"} {
		assert.Contains(t, changed[k], "replace", k)
	}
	for k := range changed {
		assert.NotRegexp(t, "^kubernetes:.*(Namespace|Secret|PersistentVolumeClaim|Job) (namespace|hf-token|model-cache|model-download)$", k, "only what the graph name names changes")
	}
	_, _, err = s.up(ctx)
	require.NoError(t, err, "the renamed graph fits the full rack once the old one is gone\n%s", s.log.String())
	old, _ := getOn(t, box.Client, graphGVK, ns, aggGraph) // NotFound; any other error fails the test
	assert.Nil(t, old, "the old graph is gone")
	assert.True(t, operatorReady(boxGraph(t, ns, "mm3-renamed")))
	after := &corev1.PersistentVolumeClaim{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared-model-cache"}, after))
	assert.Equal(t, pvc.UID, after.UID, "the same cache claim")
}

// A namespace and a token Secret the user brought are used, never managed: up leaves them out of
// the stack, and destroy leaves them as they were (here with modelCache.deleteOnDestroy, so that
// destroy deletes the claim it created and, with the real garbage collector and PV controller, the
// namespace is the only thing left).
func TestBoxAdoptedNamespaceAndSecretAreLeftAlone(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-adopted"
	require.NoError(t, rackBox(t).Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "team-hf", Namespace: ns},
		StringData: map[string]string{"HF_TOKEN": "hf_brought_by_the_user"},
	}
	require.NoError(t, box.Client.Create(ctx, secret))

	s := newBoxStack(t, "agg", ns, addRack(t, rackbox.NVL72("adopted").WithGPUs(12)), auto.ConfigMap{
		"minimax-m3:namespace.create":           {Value: "false"},
		"minimax-m3:huggingFace.secretName":     {Value: "team-hf"},
		"minimax-m3:huggingFace.existingSecret": {Value: "true"},
		"minimax-m3:modelCache.deleteOnDestroy": {Value: "true"},
	})
	require.NoError(t, s.stack.RemoveConfig(ctx, "minimax-m3:hfToken"))
	_, ops, err := s.up(ctx)
	require.NoError(t, err, s.log.String())
	for k := range opsOf(ops) {
		assert.NotRegexp(t, "^kubernetes:core/v1:(Namespace|Secret) ", k, "an adopted namespace or Secret is not managed")
	}

	_, err = s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
	require.NoError(t, err, s.log.String())
	_, kept := getOn(t, box.Client, namespaceGVK, "", ns)
	assert.True(t, kept, "the adopted namespace stays")
	live, kept := getOn(t, box.Client, secretGVK, ns, "team-hf")
	require.True(t, kept, "the adopted Secret stays")
	assert.Empty(t, live.GetLabels(), "the adopted Secret is untouched")
	assert.Empty(t, live.GetOwnerReferences(), "the adopted Secret is owned by nobody")
	_, exists := getOn(t, box.Client, pvcGVK, ns, "shared-model-cache")
	assert.False(t, exists, "deleteOnDestroy lets destroy delete the cache claim")
}

// modelDownload.waitForCompletion=false: `up` returns while the download runs, and a new model
// revision then replaces the running Job. The old Job is gone when its successor of the same name
// is applied (deleted in the background, its pod left to the real garbage collector); deleted in
// the foreground without the provider waiting, as before, it was still terminating and the
// replacement failed with `spec.template: Invalid value`.
func TestBoxADownloadNotWaitedForIsReplacedWhileItRuns(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-download-nowait"
	s := newBoxStack(t, "agg", ns, addRack(t, rackbox.NVL72("nowait").WithGPUs(12)), auto.ConfigMap{
		"minimax-m3:modelDownload.image":             {Value: rackbox.HeldImage},
		"minimax-m3:modelDownload.waitForCompletion": {Value: "false"},
		"minimax-m3:readiness.waitForReady":          {Value: "false"},
		"minimax-m3:smokeTest.enabled":               {Value: "false"},
	})
	upOK(t, s)
	heldDownload(t, ns)
	first := &batchv1.Job{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minimax-m3-model-download"}, first))
	require.Zero(t, first.Status.Succeeded, "the first download still runs")

	newRevision := "0123456789abcdef0123456789abcdef01234567"
	s.set(ctx, "minimax-m3:model.revision", newRevision)
	ops := upOK(t, s)
	assert.Contains(t, opsOf(ops)["kubernetes:batch/v1:Job model-download"], "replace")
	second := &batchv1.Job{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minimax-m3-model-download"}, second))
	assert.NotEqual(t, first.UID, second.UID, "a new Job")
	assert.Contains(t, strings.Join(second.Spec.Template.Spec.Containers[0].Args, " "), newRevision)
	eventually(t, 2*time.Minute, "the garbage collector removes the old Job's pod", func(ctx context.Context) (bool, error) {
		pods, err := listPods(ctx, ns, client.MatchingLabels{"batch.kubernetes.io/controller-uid": string(first.UID)})
		return err == nil && len(pods) == 0, err
	})
}
