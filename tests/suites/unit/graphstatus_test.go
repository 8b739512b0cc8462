package unit

import (
	"minimax-m3/internal/cluster"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What counts as the operator failing a graph: status.state failed with Ready=False written for
// the graph's current generation (the shape TestBoxOperatorFailureReasonInUpsError gets from the
// real operator). A pending graph, or a failure of an older generation, is not one.
func TestGraphFailureOf(t *testing.T) {
	graph := func(generation int64, state, status string, observed int64) *unstructured.Unstructured {
		g := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
			"state": state,
			"conditions": []any{map[string]any{"type": "Ready", "status": status, "observedGeneration": observed,
				"reason": "failed_to_reconcile_the_resources", "message": `cluster role "dynamo-planner" does not exist`}},
		}}}
		g.SetGeneration(generation)
		return g
	}
	f, ok := cluster.GraphFailureOf(graph(2, "failed", "False", 2))
	require.True(t, ok)
	assert.Equal(t, cluster.GraphFailure{Generation: 2, Reason: "failed_to_reconcile_the_resources", Message: `cluster role "dynamo-planner" does not exist`}, f)
	for name, g := range map[string]*unstructured.Unstructured{
		"pending":          graph(2, "pending", "False", 2),
		"older generation": graph(3, "failed", "False", 2),
		"ready":            graph(2, "successful", "True", 2),
	} {
		_, ok := cluster.GraphFailureOf(g)
		assert.False(t, ok, name)
	}
}

// What counts as a graph pod the scheduler cannot place: pending, unbound, PodScheduled=False with
// reason Unschedulable (the shape the real scheduler writes in the rack box's full-rack tests). A
// bound pod, a pod not yet tried, or one being deleted is not one.
func TestUnschedulableOf(t *testing.T) {
	const msg = "0/5 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 3 Insufficient nvidia.com/gpu."
	pod := func(node string, cond *corev1.PodCondition) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "g-worker-abc", Labels: map[string]string{"nvidia.com/dynamo-component": "Worker"}}}
		p.Spec.NodeName = node
		if cond != nil {
			p.Status.Conditions = []corev1.PodCondition{*cond}
		}
		return p
	}
	unschedulable := &corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}
	u, ok := cluster.UnschedulableOf(pod("", unschedulable))
	require.True(t, ok)
	assert.Equal(t, cluster.UnschedulablePod{Pod: "g-worker-abc", Component: "Worker", Reason: "Unschedulable", Message: msg}, u)

	deleting := pod("", unschedulable)
	deleting.DeletionTimestamp = &metav1.Time{}
	for name, p := range map[string]*corev1.Pod{
		"bound":     pod("tray-01", unschedulable),
		"not tried": pod("", nil),
		"scheduled": pod("", &corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}),
		"deleting":  deleting,
	} {
		_, ok := cluster.UnschedulableOf(p)
		assert.False(t, ok, name)
	}
}
