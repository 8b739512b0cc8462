package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The policy pack (policy/pack) in the real Pulumi CLI and engine: a preview with it passes on the
// stack as configured, fails on an unpinned image a pod template patch adds, and an up with it
// stops at its preview and creates no graph.
//
// The pack runs built, as `pulumi preview --policy-pack <binary>` (CLI v3.255 and later). The
// other way, `--policy-pack policy/pack`, has the CLI's Go language host build it; the host that
// builds here from Go modules is an older one that cannot (docs/pr-check.md: Policies), so it is
// not tested here.
func TestPolicyPackInThePulumiCLI(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	pack := command(t, "./policy/pack", "minimax-m3-policy-pack")
	ns := "policy-pack"
	s := makeStack(t, cluster.kubeconfig, "agg", ns, nil, nil)
	copyProgramInto(t, s.dir)
	out, err := s.cli("preview", "--policy-pack", pack)
	require.NoError(t, err, out)
	assert.Contains(t, out, "minimax-m3@v1.0.0", "the pack ran")

	s.set(ctx, "minimax-m3:frontend.podTemplatePatch.spec.containers[0].name", "probe")
	s.set(ctx, "minimax-m3:frontend.podTemplatePatch.spec.containers[0].image", "busybox")
	out, err = s.cli("preview", "--policy-pack", pack)
	require.Error(t, err, out)
	assert.Contains(t, out, "pinned-images")
	assert.Contains(t, out, `container probe: image "busybox" has no tag or digest`)

	out, err = s.cli("up", "--yes", "--policy-pack", pack)
	require.Error(t, err, out)
	assert.Contains(t, out, "pinned-images")
	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(graphGVK)
	err = cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph}, g)
	assert.True(t, apierrors.IsNotFound(err), "the graph was not created: %v", err)
}
