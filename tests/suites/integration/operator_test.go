package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/framework/poll"
	"minimax-m3/tests/framework/rackbox"
)

// The tests in this file run the real Dynamo operator (built by `make toolchain` from the source
// in MINIMAX_M3_DYNAMO_OPERATOR, default ../shared/reference/dynamo-operator) in the rack box where
// the operator itself fails or is down: what `up` and `destroy` then tell the user.

// A graph the operator fails: here the namespace's ResourceQuota allows no more ServiceAccounts
// (a site's limit the schema cannot see), so the quota admission refuses the operator's planner
// ServiceAccount. The operator's reason and message are in `up`'s output while it waits, and in
// its error when the wait ends; the operator made no workload. Nothing is played: the quota is
// enforced by the API server's admission and counted by kube-controller-manager's quota controller.
func TestBoxOperatorFailureReasonInUpsError(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	b := rackBox(t)
	ns := "box-quota"
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	require.NoError(t, b.Client.Create(ctx, namespace))
	// The stack does not manage the namespace it was given; the test removes it, and its quota.
	t.Cleanup(func() { _ = b.Client.Delete(context.Background(), namespace) })
	// The namespace's default ServiceAccount first (the service-account controller's), then a
	// quota of one, once the quota controller has counted it.
	require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
		err := b.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, err
	}))
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "service-accounts", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/serviceaccounts": resource.MustParse("1")}},
	}
	require.NoError(t, b.Client.Create(ctx, quota))
	require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the quota controller counts the default ServiceAccount", func(ctx context.Context) (bool, error) {
		if err := b.Client.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
			return false, err
		}
		used, ok := quota.Status.Used["count/serviceaccounts"]
		return ok && used.Value() == 1, nil
	}))

	s := newBoxStack(t, "agg", ns, addRack(t, rackbox.NVL72("quota").WithGPUs(12)), auto.ConfigMap{
		"minimax-m3:namespace.create":  {Value: "false"},
		"minimax-m3:readiness.timeout": {Value: "30s"},
	})
	_, _, err := s.up(ctx)
	require.Error(t, err)
	want := `failed_to_reconcile_the_resources: failed to ensure planner RBAC: failed to create service account: serviceaccounts "planner-serviceaccount" is forbidden: exceeded quota: service-accounts`
	assert.Contains(t, err.Error(), "the Dynamo operator reports DynamoGraphDeployment "+ns+"/"+aggGraph+" failed at generation 1: "+want)
	assert.Contains(t, err.Error(), "DynamoGraphDeployment "+ns+"/"+aggGraph+" was not Ready at generation 1 within 30s (readiness.timeout, 30s); the operator's Ready condition: False, failed_to_reconcile_the_resources: ")
	out := s.log.String()
	live, summary := strings.Index(out, want), strings.Index(out, "Diagnostics:")
	assert.True(t, live >= 0 && live < summary, "reported while up waited, before its summary:\n%s", out)
	reported := "the Dynamo operator reports DynamoGraphDeployment " + ns + "/" + aggGraph + " failed at generation 1: " + want
	assert.Equal(t, 2, strings.Count(out, reported), "the warning once while waiting, once in the summary")
	var deployments appsv1.DeploymentList
	require.NoError(t, b.Client.List(ctx, &deployments, client.InNamespace(ns)))
	assert.Empty(t, deployments.Items, "the operator made nothing for the failed graph")
}

// `destroy` while the operator is down: the graph keeps the operator's finalizer, and destroy
// stops after readiness.deleteTimeout saying which finalizers hold it, instead of waiting silently;
// once the operator runs again, the next destroy completes. The test stops the box's own operator,
// so no other test on the box runs beside it (parallelAloneOnBox: it runs first, beside the tests
// of the plain API server), and no other test's graph loses its operator. (The operator's
// namespace-restricted mode would give the test an operator of its own beside the box's, but
// upstream calls that mode's isolation best effort: requests already queued still reach the
// cluster-wide operator.)
func TestBoxAStoppedOperatorHoldsDestroyAtItsFinalizer(t *testing.T) {
	parallelAloneOnBox(t)
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
