package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"minimax-m3/components"
)

// Every stack isolates its graph's pods by default: only the graph's own pods, the stack's clients
// (smoke test, benchmark), the allowed namespaces and, with a route, the Gateway's namespace on
// the frontend's port (and the endpoint picker's) reach them. Another team's pods reach nothing.
func TestTheGraphsPodsAreIsolatedByDefault(t *testing.T) {
	r := mustRun(t, "disagg", nil)
	np := r.one(t, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
	assert.Equal(t, "minimax-m3-disagg-gb200-agentic-isolation", decode[string](t, np, "metadata", "name"))
	spec := decode[networkingv1.NetworkPolicySpec](t, np, "spec")
	graph := map[string]string{"nvidia.com/dynamo-graph-deployment-name": "minimax-m3-disagg-gb200-agentic"}
	assert.Equal(t, graph, spec.PodSelector.MatchLabels)
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, spec.PolicyTypes, "ingress is denied but for the rules; egress stays open (the download)")
	require.Len(t, spec.Ingress, 1, "no route: no Gateway rule")
	from := spec.Ingress[0].From
	require.Len(t, from, 4)
	assert.Equal(t, graph, from[0].PodSelector.MatchLabels)
	assert.Nil(t, from[0].NamespaceSelector, "the graph's own pods, in its namespace only")
	assert.Equal(t, map[string]string{"minimax-m3.io/graph": "minimax-m3-disagg-gb200-agentic"}, from[1].PodSelector.MatchLabels)
	assert.Equal(t, map[string]string{"kubernetes.io/metadata.name": "dynamo-system"}, from[2].NamespaceSelector.MatchLabels)
	assert.Equal(t, map[string]string{"kubernetes.io/metadata.name": "monitoring"}, from[3].NamespaceSelector.MatchLabels)
	assert.Empty(t, spec.Ingress[0].Ports, "every port, to those peers")

	c := disaggConfig(t, nil)
	assert.Equal(t, c.GraphName, components.SmokeTestJobSpec(&c).Template.Labels["minimax-m3.io/graph"], "the smoke test is a client the policy admits")

	// With the route through an InferencePool: the Gateway's namespace, on the frontend's port
	// and the endpoint picker's only.
	r = mustRun(t, "disagg", map[string]string{
		"minimax-m3:exposure": `{"enabled": true, "backend": "inferencePool", "hostname": "m3.example", "gateway": {"namespace": "gateways", "name": "inference", "sectionName": "https"}, "endpointPicker": {"image": "nvcr.io/nvidia/ai-dynamo/dynamo-frontend:1.4.0"}}`,
	})
	spec = decode[networkingv1.NetworkPolicySpec](t, r.one(t, "kubernetes:networking.k8s.io/v1:NetworkPolicy"), "spec")
	require.Len(t, spec.Ingress, 2)
	assert.Equal(t, map[string]string{"kubernetes.io/metadata.name": "gateways"}, spec.Ingress[1].From[0].NamespaceSelector.MatchLabels)
	require.Len(t, spec.Ingress[1].Ports, 2)
	assert.Equal(t, int32(8000), spec.Ingress[1].Ports[0].Port.IntVal)
	assert.Equal(t, int32(9002), spec.Ingress[1].Ports[1].Port.IntVal)

	// Off: no policy (a site whose network plugin does not enforce them, or that writes its own).
	r = mustRun(t, "agg", map[string]string{"minimax-m3:networkPolicy": `{"enabled": false}`})
	assert.Empty(t, r.byType("kubernetes:networking.k8s.io/v1:NetworkPolicy"))
}
