package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/dynamooperator"
)

// The tests in this file run the real Dynamo operator (built by `make toolchain` from the source
// in MINIMAX_M3_DYNAMO_OPERATOR, default ../shared/reference/dynamo-operator) against the local
// API server, and let it decide what becomes of the graph. No controller-manager, scheduler or
// kubelet runs here, so the tests play, and say so:
//   - the Deployment controller with its pods scheduled and ready: a Deployment's status says all
//     its replicas are updated and available at its generation (playDeployments);
//   - the garbage collector, as it works: dependents of an object deleted in the foreground are
//     deleted, and only its foregroundDeletion finalizer is removed once they are gone (other
//     finalizers, the operator's included, are left to their owners) (playForegroundGC);
//   - the Job controller for the model download, as the fast tier does.
// Everything the Dynamo operator does is the operator's.

var dcdGVK = schema.GroupVersionKind{Group: "nvidia.com", Version: "v1beta1", Kind: "DynamoComponentDeployment"}

// operatorSource is the operator's source folder; its CRD folder holds the CRD the operator
// watches beyond MINIMAX_M3_CRDS (dynamocheckpoints).
func operatorSource() string {
	if dir := os.Getenv("MINIMAX_M3_DYNAMO_OPERATOR"); dir != "" {
		return dir
	}
	return filepath.Join(cluster.root, "..", "shared", "reference", "dynamo-operator")
}

// startOperator runs the real operator (cluster-wide, as it is deployed) until the test ends; its
// log goes to the test's log when the test fails.
func startOperator(t *testing.T) *dynamooperator.Operator {
	t.Helper()
	log := &syncBuffer{}
	op, err := dynamooperator.Start(context.Background(), dynamooperator.Options{
		Binary:     filepath.Join(cluster.bin, "dynamo-operator"),
		Kubeconfig: cluster.kubeconfig,
		Config:     cluster.config,
		CRDDir:     filepath.Join(operatorSource(), "config", "crd", "bases"),
		Log:        log,
	})
	require.NoError(t, err, "operator log:\n%s", log.String())
	t.Cleanup(func() {
		_ = op.Stop()
		if t.Failed() {
			t.Logf("operator log (last 8 kB):\n%s", tail(log.String(), 8<<10))
		}
	})
	return op
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// playCluster plays, in ns, what no process here does beside the real operator: the Job
// controller (download Jobs complete), the Deployment controller with ready pods (for the
// Deployments deploymentReady accepts; nil: all), and the garbage collector. stop ends it.
func playCluster(t *testing.T, ns string, deploymentReady func(*appsv1.Deployment) bool) (stop func()) {
	return playEvery(func(ctx context.Context) {
		playJobController(ctx, t, ns, "complete")
		playDeployments(ctx, t, ns, deploymentReady)
		playForegroundGC(ctx, t, ns)
	})
}

// playDeployments marks each Deployment that ready accepts (nil: every one) ready: its replicas
// updated, ready and available at its current generation, with the Available condition, as the
// Deployment controller reports once the scheduler placed its pods and the kubelet found them ready.
func playDeployments(ctx context.Context, t *testing.T, ns string, ready func(*appsv1.Deployment) bool) {
	var list appsv1.DeploymentList
	if err := cluster.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range list.Items {
		d := &list.Items[i]
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		if (ready != nil && !ready(d)) || d.DeletionTimestamp != nil || (s.ObservedGeneration == d.Generation && s.Replicas == want && s.AvailableReplicas == want && s.UpdatedReplicas == want) {
			continue
		}
		now := metav1.Now()
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: want, UpdatedReplicas: want, ReadyReplicas: want, AvailableReplicas: want,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", Message: "set by the test playing the Deployment controller", LastUpdateTime: now, LastTransitionTime: now},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", Message: "set by the test playing the Deployment controller", LastUpdateTime: now, LastTransitionTime: now},
			},
		}
		if err := cluster.client.Status().Update(ctx, d); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			t.Logf("playing the Deployment controller: %v", err)
		}
	}
}

// gcKinds are the kinds the played garbage collector follows: what the program creates and what
// the operator creates for a graph.
var gcKinds = []schema.GroupVersionKind{
	graphGVK, dcdGVK, computeDomainGVK,
	{Group: "nvidia.com", Version: "v1alpha1", Kind: "DynamoGraphDeploymentScalingAdapter"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "batch", Version: "v1", Kind: "Job"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "Secret"},
	{Version: "v1", Kind: "PersistentVolumeClaim"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"},
}

// playForegroundGC plays the garbage collector of kube-controller-manager in ns: an object
// deleted in the foreground has its dependents (by ownerReferences) deleted, and loses its
// foregroundDeletion finalizer once no dependent blocks it; an object whose owners are all gone
// is deleted. It never removes another finalizer.
func playForegroundGC(ctx context.Context, t *testing.T, ns string) {
	var objs []*unstructured.Unstructured
	for _, k := range gcKinds {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(k.GroupVersion().WithKind(k.Kind + "List"))
		if err := cluster.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			continue
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
	byUID := map[types.UID]*unstructured.Unstructured{}
	for _, o := range objs {
		byUID[o.GetUID()] = o
	}
	foreground := metav1.DeletePropagationForeground
	for _, o := range objs {
		refs := o.GetOwnerReferences()
		if o.GetDeletionTimestamp() == nil && len(refs) > 0 {
			// Only owners of the kinds followed here can be known to be gone.
			gone := true
			for _, r := range refs {
				_, present := byUID[r.UID]
				followed := slices.ContainsFunc(gcKinds, func(k schema.GroupVersionKind) bool { return k.Kind == r.Kind })
				if present || !followed {
					gone = false
				}
			}
			if gone {
				_ = cluster.client.Delete(ctx, o, &client.DeleteOptions{PropagationPolicy: &foreground})
			}
		}
		if o.GetDeletionTimestamp() == nil || !slices.Contains(o.GetFinalizers(), metav1.FinalizerDeleteDependents) {
			continue
		}
		blocked := false
		for _, d := range objs {
			for _, r := range d.GetOwnerReferences() {
				if r.UID != o.GetUID() {
					continue
				}
				if d.GetDeletionTimestamp() == nil {
					_ = cluster.client.Delete(ctx, d, &client.DeleteOptions{PropagationPolicy: &foreground})
				}
				if r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
					blocked = true
				}
			}
		}
		if blocked {
			continue
		}
		rest := slices.DeleteFunc(slices.Clone(o.GetFinalizers()), func(f string) bool { return f == metav1.FinalizerDeleteDependents })
		o.SetFinalizers(rest)
		if err := cluster.client.Update(ctx, o); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			t.Logf("playing the garbage collector: %v", err)
		}
	}
}

// gate lets the played Deployment controller make Deployments ready only while it is open.
type gate struct{ open atomic.Bool }

func (g *gate) ready(*appsv1.Deployment) bool { return g.open.Load() }

// readyCondition is the graph's Ready condition: status, reason, message, observedGeneration.
func readyCondition(g *unstructured.Unstructured) (status, reason, message string, generation int64) {
	conds, _, _ := unstructured.NestedSlice(g.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			status, _ = m["status"].(string)
			reason, _ = m["reason"].(string)
			message, _ = m["message"].(string)
			generation, _ = m["observedGeneration"].(int64)
		}
	}
	return
}

// liveNames lists the names of a kind's objects in ns.
func liveNames(t *testing.T, gvk schema.GroupVersionKind, ns string) []string {
	t.Helper()
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	require.NoError(t, cluster.client.List(context.Background(), &list, client.InNamespace(ns)))
	var names []string
	for _, o := range list.Items {
		if o.GetDeletionTimestamp() == nil {
			names = append(names, o.GetName())
		}
	}
	slices.Sort(names)
	return names
}

var (
	deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	serviceGVK    = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
)

// upInBackground starts `up`; the channel gets its error.
func upInBackground(s *testStack) <-chan error {
	done := make(chan error, 1)
	go func() { _, _, err := s.up(context.Background()); done <- err }()
	return done
}

func requireRunning(t *testing.T, done <-chan error, why string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("up returned %s: %v", why, err)
	default:
	}
}

func requireReturns(t *testing.T, s *testStack, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err, s.log.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("up did not return:\n%s", s.log.String())
	}
}

// Both stacks against the real operator: it accepts each graph and creates its components, `up`
// returns only once the operator reports the graph Ready (after the test made the Deployments
// available), the outputs name the Service the operator created, on its port, and `destroy` with
// the operator running removes the graph, its components and everything the operator made for it.
// The disagg stack's namespace makes the operator's Dynamo namespace label exactly 63 characters,
// the most the program's validation lets through.
func TestRealOperatorServesBothStacks(t *testing.T) {
	ctx := context.Background()
	startOperator(t)
	for _, tc := range []struct {
		stack, ns, graph string
		workers          []string
	}{
		{"agg", "real-agg", aggGraph, []string{"worker"}},
		{"disagg", "real-disagg-" + strings.Repeat("x", 63-len(disaggGraph)-1-len("real-disagg-")), disaggGraph, []string{"prefillworker", "decodeworker"}},
	} {
		t.Run(tc.stack, func(t *testing.T) {
			require.LessOrEqual(t, len(tc.ns+"-"+tc.graph), 63)
			s := newStack(t, tc.stack, tc.ns, nil)
			var pods gate
			stop := playCluster(t, tc.ns, pods.ready)
			defer stop()
			done := upInBackground(s)

			frontend := tc.graph + "-frontend"
			require.Eventually(t, func() bool {
				return len(liveNames(t, deploymentGVK, tc.ns)) == 1+len(tc.workers) && slices.Contains(liveNames(t, serviceGVK, tc.ns), frontend)
			}, 2*time.Minute, 200*time.Millisecond, "the operator creates the components' Deployments and the frontend Service\n%s", s.log.String())
			deployments := liveNames(t, deploymentGVK, tc.ns)
			assert.Equal(t, deployments, liveNames(t, dcdGVK, tc.ns), "one DynamoComponentDeployment per Deployment, same name")
			assert.Contains(t, deployments, frontend)
			for _, w := range tc.workers {
				assert.True(t, slices.ContainsFunc(deployments, regexp.MustCompile("^"+tc.graph+"-"+w+"-[0-9a-f]{8}$").MatchString), "worker %s in %v", w, deployments)
			}
			var g *unstructured.Unstructured
			require.Eventually(t, func() bool {
				g, _ = get(t, graphGVK, tc.ns, tc.graph)
				status, _, _, gen := readyCondition(g)
				return status == "False" && gen == g.GetGeneration()
			}, time.Minute, 200*time.Millisecond, "the operator's Ready is False while no pod is ready")
			assert.Contains(t, g.GetFinalizers(), "nvidia.com/finalizer")
			time.Sleep(2 * time.Second)
			requireRunning(t, done, "before the operator reported Ready")

			pods.open.Store(true)
			requireReturns(t, s, done)
			g, _ = get(t, graphGVK, tc.ns, tc.graph)
			status, reason, _, gen := readyCondition(g)
			assert.Equal(t, []any{"True", "all_resources_are_ready", g.GetGeneration()}, []any{status, reason, gen}, "Ready written by the operator")

			out, err := s.stack.Outputs(ctx)
			require.NoError(t, err)
			svc := &corev1.Service{}
			require.NoError(t, cluster.client.Get(ctx, client.ObjectKey{Namespace: tc.ns, Name: out["frontendService"].Value.(string)}, svc),
				"the output names the Service the operator created")
			require.Len(t, svc.Spec.Ports, 1)
			assert.Equal(t, "http", svc.Spec.Ports[0].Name)
			assert.Equal(t, float64(svc.Spec.Ports[0].Port), out["frontendPort"].Value, "the output port is the operator's Service port")
			assert.Equal(t, fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", svc.Name, tc.ns, svc.Spec.Ports[0].Port), out["frontendUrl"].Value)

			_, err = s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
			require.NoError(t, err, s.log.String())
			_, exists := get(t, graphGVK, tc.ns, tc.graph)
			assert.False(t, exists)
			assert.Empty(t, liveNames(t, dcdGVK, tc.ns))
			assert.Empty(t, liveNames(t, deploymentGVK, tc.ns))
			assert.Empty(t, liveNames(t, serviceGVK, tc.ns))
			// What the operator leaves: the planner's ServiceAccount and RoleBinding (no owner;
			// they go with the namespace), and the cache claim the stack retains.
			assert.Equal(t, []string{"planner-serviceaccount"}, liveNames(t, schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}, tc.ns))
			assert.Equal(t, []string{"shared-model-cache"}, liveNames(t, schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}, tc.ns))
		})
	}
}

// A vLLM flag change: the operator rolls the workers to a new worker hash (a new Deployment beside
// the old one) and reports Ready False while it does; `up` waits for the new generation's Ready,
// not the old one, and the frontend is left alone.
func TestRealOperatorRollsWorkersOnAFlagChange(t *testing.T) {
	ctx := context.Background()
	startOperator(t)
	ns := "real-roll"
	s := newStack(t, "agg", ns, nil)
	var pods gate
	pods.open.Store(true)
	stop := playCluster(t, ns, pods.ready)
	defer stop()
	_, _, err := s.up(ctx)
	require.NoError(t, err, s.log.String())
	before := liveNames(t, deploymentGVK, ns)
	require.Len(t, before, 2)
	frontend := &appsv1.Deployment{}
	require.NoError(t, cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph + "-frontend"}, frontend))

	pods.open.Store(false)
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "128")
	done := upInBackground(s)
	require.Eventually(t, func() bool {
		g, _ := get(t, graphGVK, ns, aggGraph)
		_, reason, _, gen := readyCondition(g)
		return g.GetGeneration() == 2 && gen == 2 && reason == "rolling_update_in_progress" && len(liveNames(t, deploymentGVK, ns)) == 3
	}, 2*time.Minute, 200*time.Millisecond, "the operator starts a rolling update: a new worker Deployment beside the old")
	g, _ := get(t, graphGVK, ns, aggGraph)
	phase, _, _ := unstructured.NestedString(g.Object, "status", "rollingUpdate", "phase")
	assert.Contains(t, []string{"Pending", "InProgress"}, phase, "the operator's rolling update has begun")
	time.Sleep(3 * time.Second)
	requireRunning(t, done, "on the old generation's Ready")

	pods.open.Store(true)
	requireReturns(t, s, done)
	after := liveNames(t, deploymentGVK, ns)
	require.Len(t, after, 2, "the old worker Deployment is gone")
	assert.Equal(t, before[0], after[0], "the frontend Deployment is the same")
	assert.NotEqual(t, before[1], after[1], "the worker Deployment has a new hash")
	g, _ = get(t, graphGVK, ns, aggGraph)
	status, _, _, gen := readyCondition(g)
	assert.Equal(t, []any{"True", int64(2)}, []any{status, gen})
	updated, _, _ := unstructured.NestedStringSlice(g.Object, "status", "rollingUpdate", "updatedComponents")
	assert.Equal(t, []string{"Worker"}, updated)
	unchanged := &appsv1.Deployment{}
	require.NoError(t, cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph + "-frontend"}, unchanged))
	assert.Equal(t, frontend.Generation, unchanged.Generation, "the frontend was not touched")
}

// spec.restart through restart.id: the operator restarts the components one at a time in the
// configured order (each one's Deployment gets a new pod template; the next starts once it is
// ready again), and `up` returns only once the operator reports the restart Completed.
func TestRealOperatorRestartsComponentsInOrder(t *testing.T) {
	ctx := context.Background()
	startOperator(t)
	ns := "real-restart"
	s := newStack(t, "disagg", ns, nil)
	// Deployments become ready only once the test has seen the operator restart their component.
	var mu sync.Mutex
	released := map[string]bool{"": true}
	componentOf := func(d *appsv1.Deployment) string { return d.Labels["nvidia.com/dynamo-component"] }
	stop := playCluster(t, ns, func(d *appsv1.Deployment) bool {
		mu.Lock()
		defer mu.Unlock()
		return released[""] || released[componentOf(d)]
	})
	defer stop()
	_, _, err := s.up(ctx)
	require.NoError(t, err, s.log.String())

	mu.Lock()
	released[""] = false
	mu.Unlock()
	order := []string{"DecodeWorker", "PrefillWorker", "Frontend"}
	s.set(ctx, "minimax-m3:restart.id", "r1")
	for i, c := range order {
		s.set(ctx, fmt.Sprintf("minimax-m3:restart.order[%d]", i), c)
	}
	done := upInBackground(s)
	var seen [][]string
	require.Eventually(t, func() bool {
		g, _ := get(t, graphGVK, ns, disaggGraph)
		phase, _, _ := unstructured.NestedString(g.Object, "status", "restart", "phase")
		if phase == "Completed" {
			return true
		}
		inProgress, _, _ := unstructured.NestedStringSlice(g.Object, "status", "restart", "inProgress")
		if len(inProgress) > 0 && (len(seen) == 0 || !slices.Equal(seen[len(seen)-1], inProgress)) {
			seen = append(seen, inProgress)
			requireRunning(t, done, "while the operator restarts "+strings.Join(inProgress, ","))
			mu.Lock()
			for _, c := range inProgress {
				released[c] = true
			}
			mu.Unlock()
		}
		return false
	}, 3*time.Minute, 50*time.Millisecond, "the restart completes")
	assert.Equal(t, [][]string{{"DecodeWorker"}, {"PrefillWorker"}, {"Frontend"}}, seen, "one component at a time, in restart.order")
	requireReturns(t, s, done)
	g, _ := get(t, graphGVK, ns, disaggGraph)
	id, _, _ := unstructured.NestedString(g.Object, "status", "restart", "observedID")
	assert.Equal(t, "r1", id)
}

// `destroy` while the operator is stopped: the graph keeps the operator's finalizer, and destroy
// stops after readiness.deleteTimeout saying which finalizers hold it, instead of waiting silently;
// once the operator runs again, the next destroy completes.
func TestRealOperatorStoppedDestroyNamesTheFinalizer(t *testing.T) {
	ctx := context.Background()
	op := startOperator(t)
	ns := "real-stopped"
	s := newStack(t, "agg", ns, auto.ConfigMap{"minimax-m3:readiness.deleteTimeout": {Value: "15s"}})
	stop := playCluster(t, ns, nil)
	defer stop()
	_, _, err := s.up(ctx)
	require.NoError(t, err, s.log.String())

	require.NoError(t, op.Stop())
	_, err = s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "finalizers might be preventing deletion (nvidia.com/finalizer")
	g, _ := get(t, graphGVK, ns, aggGraph)
	require.NotNil(t, g)
	assert.NotNil(t, g.GetDeletionTimestamp(), "the graph waits for its finalizer")

	startOperator(t)
	_, err = s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
	require.NoError(t, err, s.log.String())
	g, _ = get(t, graphGVK, ns, aggGraph)
	assert.Nil(t, g)
	assert.Empty(t, liveNames(t, deploymentGVK, ns))
}

// A graph the operator fails (here: its planner ClusterRole is missing, a site problem the schema
// cannot see): the operator's reason and message are in `up`'s output while it waits, and in its
// error when the wait ends.
func TestRealOperatorFailureReasonInUpsError(t *testing.T) {
	ctx := context.Background()
	startOperator(t)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: dynamooperator.ClusterRoles[0]}}
	require.NoError(t, cluster.client.Delete(ctx, role))
	t.Cleanup(func() {
		_ = cluster.client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role.Name}})
	})
	ns := "real-failed"
	s := newStack(t, "agg", ns, auto.ConfigMap{"minimax-m3:readiness.timeout": {Value: "30s"}})
	stop := playCluster(t, ns, nil)
	defer stop()
	_, _, err := s.up(ctx)
	require.Error(t, err)
	want := `failed_to_reconcile_the_resources: failed to ensure planner RBAC: cluster role "dynamo-planner" does not exist`
	assert.Contains(t, err.Error(), "the Dynamo operator reports DynamoGraphDeployment real-failed/"+aggGraph+" failed at generation 1: "+want)
	assert.Contains(t, err.Error(), "timed out waiting for the condition")
	out := s.log.String()
	live, summary := strings.Index(out, want), strings.Index(out, "Diagnostics:")
	assert.True(t, live >= 0 && live < summary, "reported while up waited, before its summary:\n%s", out)
	assert.Equal(t, 2, strings.Count(out, want), "once while waiting, once in the summary")
}
