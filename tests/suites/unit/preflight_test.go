package unit

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"minimax-m3/config"
	"minimax-m3/manifest"
	"minimax-m3/placement"
	"minimax-m3/preflight"
)

// messages records what the checks say that is not a refusal.
type messages struct{ warnings, infos []string }

func (m *messages) Warn(msg string) { m.warnings = append(m.warnings, msg) }
func (m *messages) Info(msg string) { m.infos = append(m.infos, msg) }

// The pre-deploy checks return what they decided (the clique, the namespace's level, the workers'
// RuntimeClass) as a value the graph is built from, and never write into the config they read:
// the same config checked against two pools gets two decisions.
func TestPreflightDecidesWithoutWritingTheConfig(t *testing.T) {
	c := disaggConfig(t, map[string]string{"placement": `{"topologyKey": "nvidia.com/gpu.clique"}`})
	before, err := json.Marshal(c)
	require.NoError(t, err)
	s := preflight.Stack{Name: "disagg", Identity: "organization/minimax-m3/disagg"}
	a, b := gb200Rack("a", 8), gb200Rack("b", 8)
	for _, tc := range []struct {
		pool placement.Pool
		want string
	}{
		{placement.Pool{Nodes: append(a, b...), Pods: teamPods(a, 3)}, "fabric.b"},
		{placement.Pool{Nodes: append(a, b...), Pods: teamPods(b, 3)}, "fabric.a"},
	} {
		var log messages
		d, err := preflight.Check(context.Background(), &log, poolCluster{fakeCluster{}, tc.pool}, &c, s)
		require.NoError(t, err)
		assert.Equal(t, tc.want, d.Graph(0).Clique)
		assert.Equal(t, config.PodSecurityPrivileged, d.PodSecurity, "no site install found: the namespace the stack creates is privileged")
		assert.Empty(t, d.Graph(0).WorkerRuntimeClass)
		assert.Nil(t, d.Ownership.LiveGraph(c.GraphName), "no graph yet")
		assert.Contains(t, strings.Join(log.infos, "\n"), "placement: the graph's 6 workers go to clique nvidia.com/gpu.clique="+tc.want)

		// The graph built from the decision carries it; the config alone does not.
		decided, err := manifest.GraphSpec(&c, d.Graph(0))
		require.NoError(t, err)
		asConfigured, err := manifest.GraphSpec(&c, manifest.Decisions{})
		require.NoError(t, err)
		for i, comp := range decided.Components[1:] {
			assert.Contains(t, requiredTerms(comp.PodTemplate.Spec), corev1.NodeSelectorRequirement{Key: clique, Operator: corev1.NodeSelectorOpIn, Values: []string{tc.want}}, comp.Name)
			assert.NotContains(t, requiredTerms(asConfigured.Components[i+1].PodTemplate.Spec), corev1.NodeSelectorRequirement{Key: clique, Operator: corev1.NodeSelectorOpIn, Values: []string{tc.want}}, comp.Name)
		}
	}
	after, err := json.Marshal(c)
	require.NoError(t, err)
	assert.JSONEq(t, string(before), string(after), "the checks wrote nothing into the config")
}

// A render reads no cluster: only what needs none is decided.
func TestPreflightWithoutAClusterDecidesThePodSecurityLevelOnly(t *testing.T) {
	c := disaggConfig(t, nil)
	d, err := preflight.Check(context.Background(), &messages{}, nil, &c, preflight.Stack{Name: "disagg"})
	require.NoError(t, err)
	assert.Equal(t, preflight.Decisions{PodSecurity: config.PodSecurityPrivileged, Graphs: []manifest.Decisions{{}}}, d)
}

// requiredTerms are a pod's required node affinity expressions.
func requiredTerms(spec corev1.PodSpec) []corev1.NodeSelectorRequirement {
	var out []corev1.NodeSelectorRequirement
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		out = append(out, term.MatchExpressions...)
	}
	return out
}
