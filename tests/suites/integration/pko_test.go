package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"minimax-m3/portal"
	"minimax-m3/portal/pko"
)

// pkoCRDs is the Pulumi Kubernetes Operator's CRD folder: MINIMAX_M3_PKO_CRDS, else crds-pko beside
// MINIMAX_M3_CRDS (as in ../shared/reference).
func pkoCRDs(t *testing.T) string {
	dir := os.Getenv("MINIMAX_M3_PKO_CRDS")
	if dir == "" {
		dir = filepath.Join(filepath.Dir(os.Getenv("MINIMAX_M3_CRDS")), "crds-pko")
	}
	_, err := os.Stat(filepath.Join(dir, "pulumi.com_stacks.yaml"))
	require.NoError(t, err, "MINIMAX_M3_PKO_CRDS must name the Pulumi Kubernetes Operator's CRD folder")
	return dir
}

var pkoCRDsInstalled struct {
	sync.Once
	err error
}

// installPKOCRDs installs the Pulumi Kubernetes Operator's CRDs into the suite's API server, once
// for all the tests that use them.
func installPKOCRDs(t *testing.T) {
	t.Helper()
	dir := pkoCRDs(t)
	pkoCRDsInstalled.Do(func() {
		_, pkoCRDsInstalled.err = envtest.InstallCRDs(restConfigOf(t, cluster.kubeconfig), envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true, MaxTime: time.Minute})
	})
	require.NoError(t, pkoCRDsInstalled.err)
}

// playStackOperator plays the Pulumi Kubernetes Operator on one Stack: Reconciling while it
// "updates", then either Ready with outputs or Stalled with a reason, at the Stack's generation.
// When reconcilingSeen is not nil, it holds the update in Reconciling until that channel closes (the
// runner has reported the phase). It runs on a goroutine of its own: it reports what fails with
// t.Errorf and returns.
func playStackOperator(ctx context.Context, t *testing.T, dyn dynamic.Interface, ns, name string, stalled bool, outputs map[string]any, reconcilingSeen <-chan struct{}) {
	stacks := dyn.Resource(pko.StackResource).Namespace(ns)
	u, err := stacks.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("playing the operator: %v", err)
		return
	}
	gen := u.GetGeneration()
	now := time.Now().UTC().Format(time.RFC3339)
	cond := func(typ, status, reason, msg string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "lastTransitionTime": now, "observedGeneration": gen}
	}
	patch := func(status map[string]any) bool {
		b, err := json.Marshal(map[string]any{"status": status})
		if err == nil {
			_, err = stacks.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}, "status")
		}
		if err != nil {
			t.Errorf("playing the operator: %v", err)
		}
		return err == nil
	}
	if !patch(map[string]any{"observedGeneration": gen, "conditions": []any{
		cond("Ready", "False", "NotReady", "the update is running"),
		cond("Reconciling", "True", "Updating", "set by the test playing the operator: workspace pod running pulumi up"),
	}}) {
		return
	}
	if reconcilingSeen != nil {
		select {
		case <-reconcilingSeen:
		case <-time.After(time.Minute):
			t.Errorf("the runner did not report Reconciling within a minute")
			return
		}
	}
	if stalled {
		patch(map[string]any{"observedGeneration": gen, "conditions": []any{
			cond("Ready", "False", "NotReady", "stalled"),
			cond("Stalled", "True", "SourceUnavailable", "set by the test playing the operator: commit not found"),
			cond("Reconciling", "False", "Stalled", "stalled"),
		}})
		return
	}
	patch(map[string]any{"observedGeneration": gen, "outputs": outputs,
		"lastUpdate": map[string]any{"state": "succeeded", "generation": gen, "message": "update succeeded", "type": "up", "name": name + "-up"},
		"conditions": []any{
			cond("Ready", "True", "ProcessingCompleted", "the stack is up to date"),
			cond("Reconciling", "False", "ProcessingCompleted", "done"),
		}})
}

// playFailedUpdate plays the operator failing the Stack's current generation once: the last update
// failed at that generation, and it is still Reconciling (it retries before it stalls). It runs on
// a goroutine of its own: it reports what fails with t.Errorf.
func playFailedUpdate(ctx context.Context, t *testing.T, dyn dynamic.Interface, ns, name string) {
	stacks := dyn.Resource(pko.StackResource).Namespace(ns)
	u, err := stacks.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("playing the operator: %v", err)
		return
	}
	gen := u.GetGeneration()
	now := time.Now().UTC().Format(time.RFC3339)
	b, err := json.Marshal(map[string]any{"status": map[string]any{"observedGeneration": gen,
		"lastUpdate": map[string]any{"state": "failed", "generation": gen, "failures": 1, "type": "up", "name": name + "-up-2",
			"message": "set by the test playing the operator: update failed: 1 error occurred"},
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "False", "reason": "NotReady", "message": "retrying", "lastTransitionTime": now, "observedGeneration": gen},
			map[string]any{"type": "Reconciling", "status": "True", "reason": "Retrying", "message": "the update failed; retrying", "lastTransitionTime": now, "observedGeneration": gen},
		}}})
	if err == nil {
		_, err = stacks.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}, "status")
	}
	if err != nil {
		t.Errorf("playing the operator: %v", err)
	}
}

// The operator runner: its Stack passes a server-side dry run against the operator's CRD, is
// written with the token only in a Secret it references, and its progress and result are the
// operator's status conditions (the test plays the operator: Reconciling, then Ready with
// outputs; then a stalled update).
// Workspace images pinned by digest, as the runner requires.
const (
	workspaceImage = "pulumi/pulumi-go:3.276.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	prebuiltImage  = "registry.example.com/minimax-m3-workspace:1.2.0@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func TestOperatorRunner(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	kube, dyn := kubeClients(t, cluster.kubeconfig)
	installPKOCRDs(t)
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pko"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	runner := &pko.Runner{
		Kube: kube, Dynamic: dyn, Namespace: "pko",
		ProjectRepo: "https://git.example.com/platform/minimax-m3.git", Commit: "0123456789abcdef0123456789abcdef01234567",
		Backend: "s3://pulumi-state", SecretsProvider: "awskms://alias/pulumi",
		EnvRefs:            map[string]pko.SecretKey{"PULUMI_CONFIG_PASSPHRASE": {Name: "pulumi", Key: "passphrase"}, "AWS_ACCESS_KEY_ID": {Name: "aws", Key: "id"}},
		ServiceAccountName: "pulumi",
		Image:              workspaceImage,
	}
	r := portalRequest("disagg", "disagg-eu", "inference-eu")
	// Without a Gate (the policies and roll consent on a preview) the runner writes nothing, unless
	// the site says it checks requests another way; TestPortalUpNeedsConsentToRollWorkers runs the
	// Gate. The rest of this test is about what the runner writes.
	_, err = runner.Apply(ctx, r, pko.ApplyOptions{})
	require.ErrorIs(t, err, pko.ErrUngated)
	_, err = dyn.Resource(pko.StackResource).Namespace("pko").Get(ctx, "disagg-eu", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "nothing written")
	runner.Ungated = true
	// The operator's workspace runs on a real cluster: it waits for the download and the graph.
	r.Config.ModelDownload.WaitForCompletion, r.Config.Readiness.WaitForReady = true, true

	// Invalid: the same problems as the Manager's, nothing written.
	bad := r
	bad.Config.DecodeWorker.Replicas = 0
	_, err = runner.Apply(ctx, bad, pko.ApplyOptions{})
	var invalid *portal.InvalidRequestError
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, "decodeWorker.replicas", invalid.Problems[0].Key)

	// A server-side dry run against the operator's CRD: accepted, nothing created.
	dry, err := runner.Apply(ctx, r, pko.ApplyOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, "disagg-eu", dry.GetName())
	_, err = dyn.Resource(pko.StackResource).Namespace("pko").Get(ctx, "disagg-eu", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a dry run creates nothing")

	// The workspace image is pinned by digest, and the workspace runs as the account the site
	// names: a moving tag, or the namespace's default account, is refused before anything is written.
	for _, bad := range []func(r *pko.Runner){
		func(r *pko.Runner) { r.Image = "pulumi/pulumi:latest-nonroot" },
		func(r *pko.Runner) { r.Image = "" },
		func(r *pko.Runner) { r.ServiceAccountName = "" },
	} {
		unpinned := *runner
		bad(&unpinned)
		_, err := unpinned.Apply(ctx, r, pko.ApplyOptions{})
		require.Error(t, err)
		_, err = dyn.Resource(pko.StackResource).Namespace("pko").Get(ctx, "disagg-eu", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "nothing written")
	}

	// The prebuilt-program form (a workspace image with the project) passes the dry run too.
	image := *runner
	image.ProjectRepo, image.Commit, image.Image, image.LocalDir = "", "", prebuiltImage, "/share/minimax-m3"
	imaged, err := image.Apply(ctx, r, pko.ApplyOptions{DryRun: true})
	require.NoError(t, err)
	ws, _, _ := unstructured.NestedMap(imaged.Object, "spec", "workspaceTemplate", "spec")
	assert.Equal(t, map[string]any{"image": prebuiltImage, "local": map[string]any{"dir": "/share/minimax-m3"}, "serviceAccountName": "pulumi",
		"resources": map[string]any{"requests": map[string]any{"cpu": "1", "memory": "2Gi"}, "limits": map[string]any{"memory": "4Gi"}}}, ws,
		"the workspace pod sized for this program by default (the CRD accepted it in the dry run)")
	sized := image
	sized.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	small, err := sized.Apply(ctx, r, pko.ApplyOptions{DryRun: true})
	require.NoError(t, err)
	got, _, _ := unstructured.NestedMap(small.Object, "spec", "workspaceTemplate", "spec", "resources")
	assert.Equal(t, map[string]any{"requests": map[string]any{"memory": "1Gi"}}, got)

	stack, err := runner.Apply(ctx, r, pko.ApplyOptions{})
	require.NoError(t, err)
	raw, err := json.Marshal(stack.Object)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), portalToken, "the token is only in its Secret")
	spec := stack.Object["spec"].(map[string]any)
	assert.Equal(t, "disagg-eu", spec["stack"])
	assert.Equal(t, "https://git.example.com/platform/minimax-m3.git", spec["projectRepo"])
	assert.Equal(t, map[string]any{"minimax-m3:profile": "disagg", "minimax-m3:namespace": `{"name":"inference-eu"}`,
		"minimax-m3:modelDownload": `{"timeout":"3m"}`, "minimax-m3:readiness": `{"timeout":"3m"}`, "minimax-m3:smokeTest": `{"enabled":false}`,
		"minimax-m3:kubernetes": `{"requireRead":true}`}, spec["config"], "the workspace refuses to skip the ownership check, as the portal's runs")
	assert.Equal(t, map[string]any{"minimax-m3:hfToken": map[string]any{"type": "Secret", "secret": map[string]any{"name": "disagg-eu-hf-token", "key": "token", "namespace": "pko"}}}, spec["secretsRef"])
	assert.Equal(t, "awskms://alias/pulumi", spec["secretsProvider"])
	secret, err := kube.CoreV1().Secrets("pko").Get(ctx, "disagg-eu-hf-token", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, portalToken, string(secret.Data["token"]))

	var events []portal.Event
	var mu sync.Mutex
	reconciling := make(chan struct{})
	var once sync.Once
	progress := func(e portal.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		if e.Status == "Reconciling" {
			once.Do(func() { close(reconciling) })
		}
	}
	go playStackOperator(ctx, t, dyn, "pko", "disagg-eu", false, map[string]any{"namespace": "inference-eu", "gpuCount": 24, "graphName": disaggGraph}, reconciling)
	// The played operator reports its own failures and returns: a bounded wait ends the test then.
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := runner.Wait(waitCtx, "disagg-eu", progress)
	require.NoError(t, err)
	assert.Equal(t, "succeeded", res.State)
	assert.Equal(t, 24, res.Outputs.GPUCount)
	assert.Equal(t, "inference-eu", res.Outputs.Namespace)
	mu.Lock()
	var statuses []string
	for _, e := range events {
		statuses = append(statuses, e.Status+" "+e.Message)
	}
	mu.Unlock()
	assert.Contains(t, statuses, "Reconciling Updating: set by the test playing the operator: workspace pod running pulumi up")
	assert.Contains(t, statuses, "Ready ProcessingCompleted: the stack is up to date")

	// A change the operator cannot apply: Stalled, with its reason, for the new generation.
	r.Config.DecodeWorker.Replicas = 4
	_, err = runner.Apply(ctx, r, pko.ApplyOptions{})
	require.NoError(t, err)
	go playStackOperator(ctx, t, dyn, "pko", "disagg-eu", true, nil, nil)
	_, err = runner.Wait(waitCtx, "disagg-eu", nil)
	var stalled *pko.StalledError
	require.ErrorAs(t, err, &stalled)
	assert.Equal(t, "SourceUnavailable", stalled.Reason)
	assert.Equal(t, fmt.Sprintf("stack disagg-eu stalled: SourceUnavailable: %s", stalled.Message), err.Error())

	// A failed update of the current generation: the operator keeps retrying (Reconciling) and
	// stalls only after several failures; Wait returns the failure at once.
	r.Config.DecodeWorker.Replicas = 5
	_, err = runner.Apply(ctx, r, pko.ApplyOptions{})
	require.NoError(t, err)
	go playFailedUpdate(ctx, t, dyn, "pko", "disagg-eu")
	_, err = runner.Wait(waitCtx, "disagg-eu", nil)
	var failed *pko.UpdateFailedError
	require.ErrorAs(t, err, &failed)
	assert.Equal(t, "set by the test playing the operator: update failed: 1 error occurred", failed.Message)

	// A commit is pinned unless branch tracking is asked for by name.
	for name, change := range map[string]func(*pko.Runner){
		"neither":                      func(o *pko.Runner) { o.Commit = "" },
		"a branch without TrackBranch": func(o *pko.Runner) { o.Commit, o.Branch = "", "main" },
		"a short commit":               func(o *pko.Runner) { o.Commit = "0123456" },
		"TrackBranch without a branch": func(o *pko.Runner) { o.Commit, o.TrackBranch = "", true },
	} {
		o := *runner
		change(&o)
		_, err := o.StackObject(r)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "deploys a reviewed commit", name)
	}
	tracking := *runner
	tracking.Commit, tracking.TrackBranch, tracking.Branch = "", true, "main"
	tracked, err := tracking.StackObject(r)
	require.NoError(t, err)
	assert.Equal(t, "main", tracked.Object["spec"].(map[string]any)["branch"])
	assert.NotContains(t, tracked.Object["spec"], "commit")

	require.NoError(t, runner.Delete(ctx, "disagg-eu"))
	_, err = kube.CoreV1().Secrets("pko").Get(ctx, "disagg-eu-hf-token", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))

	// Another team's Stack of the name a request picks, and another tool's Secret of its token's
	// name: neither is taken over (nor written at all), and the request's Stack is not made.
	theirs := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "pulumi.com/v1", "kind": "Stack",
		"metadata": map[string]any{"name": "disagg-team-b", "namespace": "pko", "labels": map[string]any{"app.kubernetes.io/managed-by": "team-b-gitops"}},
		"spec":     map[string]any{"stack": "team-b/prod", "projectRepo": "https://git.example.com/team-b/infra.git", "commit": "fedcba9876543210fedcba9876543210fedcba98"}}}
	_, err = dyn.Resource(pko.StackResource).Namespace("pko").Create(ctx, theirs, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = runner.Apply(ctx, portalRequest("disagg", "disagg-team-b", "inference-b"), pko.ApplyOptions{})
	var notOurs *pko.NotOursError
	require.ErrorAs(t, err, &notOurs)
	assert.Contains(t, err.Error(), "Stack pko/disagg-team-b exists and this portal did not make it (app.kubernetes.io/managed-by=team-b-gitops)")
	kept, err := dyn.Resource(pko.StackResource).Namespace("pko").Get(ctx, "disagg-team-b", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "team-b/prod", kept.Object["spec"].(map[string]any)["stack"], "their Stack as it was")
	_, err = kube.CoreV1().Secrets("pko").Get(ctx, "disagg-team-b-hf-token", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no token Secret written beside it")

	_, err = kube.CoreV1().Secrets("pko").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "disagg-team-c-hf-token", Namespace: "pko"},
		StringData: map[string]string{"token": "theirs"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = runner.Apply(ctx, portalRequest("disagg", "disagg-team-c", "inference-c"), pko.ApplyOptions{})
	require.ErrorAs(t, err, &notOurs)
	assert.Contains(t, err.Error(), "Secret pko/disagg-team-c-hf-token exists and this portal did not make it (app.kubernetes.io/managed-by=no one recorded)")
	secret, err = kube.CoreV1().Secrets("pko").Get(ctx, "disagg-team-c-hf-token", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "theirs", string(secret.Data["token"]), "their Secret as it was")
	_, err = dyn.Resource(pko.StackResource).Namespace("pko").Get(ctx, "disagg-team-c", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Stack written")

	// Nor does Delete remove what the runner did not make.
	require.ErrorAs(t, runner.Delete(ctx, "disagg-team-b"), &notOurs)
	_, err = dyn.Resource(pko.StackResource).Namespace("pko").Get(ctx, "disagg-team-b", metav1.GetOptions{})
	require.NoError(t, err, "their Stack is still there")
	require.ErrorAs(t, runner.Delete(ctx, "disagg-team-c"), &notOurs)
	_, err = kube.CoreV1().Secrets("pko").Get(ctx, "disagg-team-c-hf-token", metav1.GetOptions{})
	require.NoError(t, err, "their Secret is still there")

	// The runner's registries bind a request as the portal's do: no widening, no image from elsewhere.
	wide := portalRequest("disagg", "disagg-team-d", "inference-d")
	wide.Config.ImageRegistries = []string{"nvcr.io/nvidia", "docker.io/library", "evil.example"}
	wide.Config.Image = "evil.example/vllm:1"
	_, err = runner.Apply(ctx, wide, pko.ApplyOptions{})
	require.ErrorAs(t, err, &invalid)
	assert.Contains(t, err.Error(), "imageRegistries: is the portal's to set")
	assert.Contains(t, err.Error(), `image: "evil.example/vllm:1" is not from a registry`)
}
