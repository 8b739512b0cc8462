package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/components"
)

var (
	namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	secretGVK    = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	configMapGVK = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	pvcGVK       = schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}
	jobGVK       = schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
)

func liveGraphSpec(t *testing.T, ns, name string) components.DynamoGraphDeploymentSpec {
	t.Helper()
	return liveGraphSpecOn(t, cluster.client, ns, name)
}

// liveGraphSpecOn is liveGraphSpec on another cluster (the rack box).
func liveGraphSpecOn(t *testing.T, c client.Client, ns, name string) components.DynamoGraphDeploymentSpec {
	t.Helper()
	g, ok := getOn(t, c, graphGVK, ns, name)
	require.True(t, ok, "graph %s/%s exists", ns, name)
	b, err := json.Marshal(g.Object["spec"])
	require.NoError(t, err)
	var spec components.DynamoGraphDeploymentSpec
	require.NoError(t, json.Unmarshal(b, &spec))
	return spec
}

func opsOf(ops []operation) map[string]string {
	out := map[string]string{}
	for _, o := range ops {
		out[o.Type+" "+o.Name] += o.Op + " "
	}
	for k, v := range out {
		out[k] = strings.TrimSpace(v)
	}
	return out
}

func toJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// graphOps is opsOf without the smoke test's Job, which a new graph generation replaces (a new
// test for the new generation) whenever the smoke test is on.
func graphOps(t *testing.T, ops []operation) map[string]string {
	t.Helper()
	m := opsOf(ops)
	const smoke = "kubernetes:batch/v1:Job smoke-test"
	if op, ok := m[smoke]; ok {
		assert.Contains(t, op, "replace", "the smoke test runs again for the new generation")
		delete(m, smoke)
	}
	return m
}
