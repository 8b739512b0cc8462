package integration

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/manifest"
	"minimax-m3/tests/framework/rackbox"
)

// A shared GB200 pool in the box: several racks (cliques) that share a pool label the workers
// select, nothing pinned per rack, partly used by another team's pods, with trays cordoned for
// maintenance or not yet labelled with their clique. The real scheduler places the pods; the
// program decides the clique before anything is created.

const poolLabel = "rackbox.minimax-m3.io/team-pool"

// addPool adds racks sharing the pool label for the test's lifetime.
func addPool(t *testing.T, pool string, racks ...rackbox.Rack) []rackbox.Rack {
	t.Helper()
	for i := range racks {
		racks[i].Labels = map[string]string{poolLabel: pool}
		addRack(t, racks[i])
	}
	return racks
}

// occupy plays another team holding every GPU of each named tray, for the test's lifetime.
func occupy(t *testing.T, team string, trays ...string) {
	t.Helper()
	pods, err := box.Occupy(context.Background(), team, trays...)
	for _, p := range pods {
		t.Cleanup(func() { _ = box.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	}
	require.NoError(t, err)
}

// release deletes the team's pod on a tray.
func release(t *testing.T, team, tray string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "training-" + tray}}
	require.NoError(t, box.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)))
	eventually(t, 2*time.Minute, "the team's pod on "+tray+" is gone", func(ctx context.Context) (bool, error) {
		err := box.Client.Get(ctx, client.ObjectKeyFromObject(p), p)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// patchNode changes a tray as maintenance or a fabric manager would.
func patchNode(t *testing.T, name string, change func(*corev1.Node)) {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, box.Client.Get(context.Background(), client.ObjectKey{Name: name}, n))
	before := n.DeepCopy()
	change(n)
	require.NoError(t, box.Client.Patch(context.Background(), n, client.MergeFrom(before)))
}

// newPoolStack is a stack whose workers select the pool (not a rack) and stay in one clique: agg
// sets placement.topologyKey as the deploy guide does, disagg has it by default.
func newPoolStack(t *testing.T, stack, ns, pool string, extra auto.ConfigMap) *testStack {
	t.Helper()
	cfg := auto.ConfigMap{"minimax-m3:smokeTest.enabled": {Value: "true"}}
	if stack == "agg" {
		cfg["minimax-m3:placement.topologyKey"] = auto.ConfigValue{Value: rackbox.CliqueLabel}
	}
	for _, role := range workerRoles(stack) {
		cfg[fmt.Sprintf("minimax-m3:%s.scheduling.nodeSelector[%q]", role, poolLabel)] = auto.ConfigValue{Value: pool}
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return makeStack(t, rackBox(t).Kubeconfig, stack, ns, cfg, nil)
}

// workerNodes maps each of the graph's worker pods to its tray.
func workerNodes(t *testing.T, ns, graph string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range podsOf(t, ns, client.MatchingLabels{graphLabelKey: graph}) {
		if p.Labels["nvidia.com/dynamo-component"] != "Frontend" && p.DeletionTimestamp == nil {
			out[p.Name] = p.Spec.NodeName
		}
	}
	return out
}

func inRack(r rackbox.Rack, trays ...string) []string {
	names := r.NodeNames()
	var out []string
	for _, n := range trays {
		if slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	return out
}

// On a pool of two partly used racks where only one has room for the whole graph, the graph lands
// there whole: the clique with fewer free GPUs (the one the scheduler's spreading favours for the
// first worker, after which the recipe's pod affinity strands the rest) is left alone. The clique's
// cordoned tray and its tray without the clique label are avoided. Then, with the other rack freed
// into the tighter fit, a flag change rolls the workers within the clique they run in.
func TestBoxAGraphLandsWholeInTheOneCliqueWithRoomAgg(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	racks := addPool(t, "placement-agg", rackbox.NVL72("pl-agg-a").WithGPUs(16), rackbox.NVL72("pl-agg-b").WithGPUs(24))
	a, b := racks[0], racks[1]
	// a: 2 of 4 trays free (8 GPUs); b: 3 of 6 (12 GPUs), beside a tray of the team's, a
	// cordoned one and one without its clique label.
	occupy(t, "team-b-agg", a.NodeNames()[0], a.NodeNames()[1], b.NodeNames()[0])
	cordoned, unlabelled := b.NodeNames()[1], b.NodeNames()[2]
	patchNode(t, cordoned, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	patchNode(t, unlabelled, func(n *corev1.Node) { delete(n.Labels, rackbox.CliqueLabel) })

	ns := "box-placement-agg"
	s := newPoolStack(t, "agg", ns, "placement-agg", nil)
	upOK(t, s)
	assert.Contains(t, s.log.String(), "placement: the graph's 3 workers go to clique nvidia.com/gpu.clique="+b.Clique())
	nodes := workerNodes(t, ns, aggGraph)
	require.Len(t, nodes, 3)
	for pod, node := range nodes {
		assert.Contains(t, b.NodeNames(), node, "worker %s lands in the clique with room", pod)
		assert.NotContains(t, []string{cordoned, unlabelled}, node, "worker %s avoids the cordoned and the unlabelled tray", pod)
	}
	assert.Equal(t, rackbox.CliqueLabel+"="+b.Clique(), boxGraph(t, ns, aggGraph).GetAnnotations()[manifest.PlacementAnnotation])
	// The budget selects the workers the operator made (the disruption controller counts them).
	eventually(t, 2*time.Minute, "the Worker budget counts the three workers", func(ctx context.Context) (bool, error) {
		pdb := &policyv1.PodDisruptionBudget{}
		err := box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph + "-worker"}, pdb)
		return err == nil && pdb.Status.ExpectedPods == 3 && pdb.Status.DisruptionsAllowed == 1, client.IgnoreNotFound(err)
	})

	// The other team frees one of a's trays: a (12 free, first by name) is now as tight a fit as
	// b for a new graph. A flag change rolls the workers where they run.
	release(t, "team-b-agg", a.NodeNames()[0])
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "128")
	upOK(t, s)
	assert.Equal(t, rackbox.CliqueLabel+"="+b.Clique(), boxGraph(t, ns, aggGraph).GetAnnotations()[manifest.PlacementAnnotation])
	eventually(t, 2*time.Minute, "the rolled workers run in b", func(ctx context.Context) (bool, error) {
		pods, err := listPods(ctx, ns, client.MatchingLabels{graphLabelKey: aggGraph, "nvidia.com/dynamo-component": "Worker"})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			if !strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--max-num-seqs 128") || len(inRack(b, p.Spec.NodeName)) == 0 {
				return false, nil
			}
			n++
		}
		return n == 3, nil
	})

	// Two trays of the running clique go out of service: one cordoned for maintenance, one whose
	// kubelet fell silent (the node lifecycle controller then taints it unreachable). A change that
	// rolls the workers is refused at preview; the refusal names every tray of the clique out of
	// service with its state (not the taints Kubernetes put on them), the choices, and the key
	// changed beside the key refused.
	var running []string
	for _, node := range workerNodes(t, ns, aggGraph) {
		running = append(running, node)
	}
	require.Len(t, inRack(b, running...), 3)
	slices.Sort(running)
	patchNode(t, running[0], func(n *corev1.Node) { n.Spec.Unschedulable = true })
	require.NoError(t, rackBox(t).MakeNodeNotReady(ctx, running[1]))
	generation := boxGraph(t, ns, aggGraph).GetGeneration()
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "96")
	_, err := s.preview(ctx)
	require.Error(t, err, "b now holds one worker")
	out := s.log.String() + err.Error()
	assert.Contains(t, out, "minimax-m3:placement.clique: the graph runs in clique "+rackbox.CliqueLabel+"="+b.Clique()+", which holds 1 of its 3 workers")
	outOfService := regexp.MustCompile(`with its trays out of service: ([^;]+);`).FindStringSubmatch(out)
	require.NotNil(t, outOfService, out)
	assert.Contains(t, outOfService[1], cordoned+" cordoned")
	assert.Contains(t, outOfService[1], running[0]+" cordoned")
	assert.Contains(t, outOfService[1], running[1]+" not Ready (Ready is Unknown: NodeStatusUnknown)")
	assert.NotContains(t, outOfService[1], "tainted", "the taints Kubernetes puts on such trays are not the reason given")
	assert.Contains(t, out, "uncordon one (kubectl uncordon <node>)")
	assert.Contains(t, out, "or shrink the graph (worker.replicas)")
	assert.Contains(t, out, "refused now because this update rolls the Worker pods (their template changes: a worker.* key")
	assert.Equal(t, generation, boxGraph(t, ns, aggGraph).GetGeneration(), "nothing was changed")
}

func TestBoxAGraphLandsWholeInTheOneCliqueWithRoomDisagg(t *testing.T) {
	parallelOnBox(t)
	// disagg's default topologyKey keeps its six workers in one clique.
	racks := addPool(t, "placement-disagg", rackbox.NVL72("pl-dis-a").WithGPUs(32), rackbox.NVL72("pl-dis-b").WithGPUs(32))
	a, b := racks[0], racks[1]
	occupy(t, "team-b-disagg", append(a.NodeNames()[:4], b.NodeNames()[:2]...)...) // a: 16 free; b: 24
	ns := "box-placement-disagg"
	s := newPoolStack(t, "disagg", ns, "placement-disagg", nil)
	upOK(t, s)
	nodes := workerNodes(t, ns, disaggGraph)
	require.Len(t, nodes, 6)
	for pod, node := range nodes {
		assert.Contains(t, b.NodeNames(), node, "worker %s lands in the clique with room", pod)
	}
}

// Two cliques each too small for the graph: preview and up refuse before anything is created,
// with the table of cliques.
func TestBoxTwoCliquesEachTooSmallAreRefusedBeforeAnythingIsCreated(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	racks := addPool(t, "placement-small", rackbox.NVL72("pl-small-c").WithGPUs(32), rackbox.NVL72("pl-small-d").WithGPUs(24))
	c, d := racks[0], racks[1]
	occupy(t, "team-b-small", append(c.NodeNames()[:5], d.NodeNames()[:2]...)...) // c: 3 free trays; d: 4
	ns := "box-placement-small"
	s := newPoolStack(t, "disagg", ns, "placement-small", nil)
	for _, run := range []func() error{
		func() error { _, err := s.preview(ctx); return err },
		func() error { _, _, err := s.up(ctx); return err },
	} {
		err := run()
		require.Error(t, err)
		out := s.log.String() + err.Error()
		assert.Contains(t, out, "minimax-m3:placement.topologyKey: no NVLink clique has room for the graph's 6 workers")
		assert.Regexp(t, c.Clique()+`\s+8\s+12\s+3 of 6 workers`, out)
		assert.Regexp(t, d.Clique()+`\s+6\s+16\s+4 of 6 workers`, out)
	}
	err := box.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "nothing was created: %v", err)
}
