package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/dynamooperator"
	"minimax-m3/tests/rackbox"
)

// The tests in this file run the real Dynamo operator (built by `make toolchain` from the source
// in MINIMAX_M3_DYNAMO_OPERATOR, default ../shared/reference/dynamo-operator) where the operator
// itself fails or is down: what `up` and `destroy` then tell the user; and on a plain API server
// of their own, the benchmark sweep's fast tier (bench_test.go). Everything the operator does is
// the operator's; the graph's own lifecycle with it is tested in the rack box (box_test.go).

// The tests that run the real operator on a plain API server (no controller runs there but the
// operator; what else a cluster runs is played) share one of their own, beside the suite's: the
// operator is cluster-wide, and on the suite's API server it would reconcile every other test's
// graph. They run one after another (each starts and stops its operator), while the other tests
// run in parallel.
func TestRealOperatorOnItsOwnAPIServer(t *testing.T) {
	t.Parallel()
	c, err := startAPIServer()
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	api := &apiServer{kubeconfig: c.Kubeconfig, config: c.Config, client: c.Client}
	for _, tc := range []struct {
		name string
		test func(*testing.T, *apiServer)
	}{
		{"FailureReasonInUpsError", failureReasonInUpsError},
		{"BenchmarkSweep", benchmarkSweep},
		{"BenchmarkSweepInterruptAndFailedWriteCheck", benchmarkSweepInterruptAndFailedWriteCheck},
		{"BenchCommand", benchCommand},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, api) })
	}
}

// operatorSource is the operator's source folder; its CRD folder holds the CRD the operator
// watches beyond MINIMAX_M3_CRDS (dynamocheckpoints).
func operatorSource() string {
	if dir := os.Getenv("MINIMAX_M3_DYNAMO_OPERATOR"); dir != "" {
		return dir
	}
	return filepath.Join(cluster.root, "..", "shared", "reference", "dynamo-operator")
}

// startPlainOperator runs the real operator, cluster-wide, on a plain API server until the test
// ends; its log goes to the test's log when the test fails.
func startPlainOperator(t *testing.T, api *apiServer) *dynamooperator.Operator {
	t.Helper()
	log := &syncBuffer{}
	op, err := dynamooperator.Start(context.Background(), dynamooperator.Options{
		Binary:     filepath.Join(cluster.bin, "dynamo-operator"),
		Kubeconfig: api.kubeconfig,
		Config:     api.config,
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

// A graph the operator fails (here: its planner ClusterRole is missing, a site problem the schema
// cannot see): the operator's reason and message are in `up`'s output while it waits, and in its
// error when the wait ends. It runs on the real-operator tests' own API server, where no other
// test's graph needs the ClusterRole it deletes, and plays nothing: the stack does not wait for its download (no Job
// controller runs there), and the operator fails the graph before it makes any Deployment.
func failureReasonInUpsError(t *testing.T, api *apiServer) {
	ctx := context.Background()
	startPlainOperator(t, api)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: dynamooperator.ClusterRoles[0]}}
	require.NoError(t, api.client.Delete(ctx, role))
	t.Cleanup(func() {
		_ = api.client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role.Name}})
	})
	ns := "real-failed"
	s := makeStack(t, api.kubeconfig, "agg", ns, auto.ConfigMap{
		"minimax-m3:readiness.timeout":               {Value: "30s"},
		"minimax-m3:modelDownload.waitForCompletion": {Value: "false"},
	}, api.client)
	_, _, err := s.up(ctx)
	require.Error(t, err)
	want := `failed_to_reconcile_the_resources: failed to ensure planner RBAC: cluster role "dynamo-planner" does not exist`
	assert.Contains(t, err.Error(), "the Dynamo operator reports DynamoGraphDeployment real-failed/"+aggGraph+" failed at generation 1: "+want)
	assert.Contains(t, err.Error(), "timed out waiting for the condition")
	out := s.log.String()
	live, summary := strings.Index(out, want), strings.Index(out, "Diagnostics:")
	assert.True(t, live >= 0 && live < summary, "reported while up waited, before its summary:\n%s", out)
	assert.Equal(t, 2, strings.Count(out, want), "once while waiting, once in the summary")
	var deployments appsv1.DeploymentList
	require.NoError(t, api.client.List(ctx, &deployments, client.InNamespace(ns)))
	assert.Empty(t, deployments.Items, "the operator made nothing for the failed graph")
}

// `destroy` while the operator is down: the graph keeps the operator's finalizer, and destroy
// stops after readiness.deleteTimeout saying which finalizers hold it, instead of waiting silently;
// once the operator runs again, the next destroy completes. The test stops the box's own operator,
// so it is not parallel: Go runs it before the parallel tests start, and no other test's graph
// loses its operator. (The operator's namespace-restricted mode would give the test an operator of
// its own beside the box's, but upstream calls that mode's isolation best effort: requests already
// queued still reach the cluster-wide operator.)
func TestBoxAStoppedOperatorHoldsDestroyAtItsFinalizer(t *testing.T) {
	ctx := context.Background()
	b := rackBox(t)
	ns := "box-operator-down"
	s := newBoxStack(t, "agg", ns, addRack(t, rackbox.NVL72("operator-down").WithGPUs(12)), auto.ConfigMap{
		"minimax-m3:readiness.deleteTimeout": {Value: "15s"},
	})
	upOK(t, s)

	require.NoError(t, box.operator.Stop())
	restarted := false
	restart := func() {
		if !restarted {
			restarted = true
			box.operator, box.err = startBoxOperator()
		}
	}
	t.Cleanup(restart) // the box's other tests need it, whatever happens here
	_, err := s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "finalizers might be preventing deletion (nvidia.com/finalizer")
	g, _ := getOn(t, b.Client, graphGVK, ns, aggGraph)
	require.NotNil(t, g, "the graph waits for its finalizer")
	assert.NotNil(t, g.GetDeletionTimestamp())
	assert.Contains(t, g.GetFinalizers(), "nvidia.com/finalizer")

	restart()
	require.NoError(t, box.err, boxLogs())
	_, err = s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
	require.NoError(t, err, s.log.String())
	g, _ = getOn(t, b.Client, graphGVK, ns, aggGraph)
	assert.Nil(t, g, "the graph is gone")
	var deployments appsv1.DeploymentList
	require.NoError(t, b.Client.List(ctx, &deployments, client.InNamespace(ns)))
	for _, d := range deployments.Items {
		assert.NotNil(t, d.DeletionTimestamp, "Deployment %s is on its way out", d.Name)
	}
}
