package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"minimax-m3/components"
)

// What counts as the operator failing a graph: status.state failed with Ready=False written for
// the graph's current generation (the shape TestRealOperatorFailureReasonInUpsError gets from the
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
	f, ok := components.GraphFailureOf(graph(2, "failed", "False", 2))
	require.True(t, ok)
	assert.Equal(t, components.GraphFailure{Generation: 2, Reason: "failed_to_reconcile_the_resources", Message: `cluster role "dynamo-planner" does not exist`}, f)
	for name, g := range map[string]*unstructured.Unstructured{
		"pending":          graph(2, "pending", "False", 2),
		"older generation": graph(3, "failed", "False", 2),
		"ready":            graph(2, "successful", "True", 2),
	} {
		_, ok := components.GraphFailureOf(g)
		assert.False(t, ok, name)
	}
}
