package placement_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/placement"
)

const key = "nvidia.com/gpu.clique"

var gpuTaint = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}

// rack is trays of 4 GPUs in one clique, Ready, tainted for GPUs like a managed GB200 pool.
func rack(name string, trays int) []corev1.Node {
	var nodes []corev1.Node
	for i := range trays {
		res := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("140"),
			corev1.ResourceMemory: resource.MustParse("880Gi"),
			placement.GPU:         resource.MustParse("4"),
		}
		nodes = append(nodes, corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-tray-%02d", name, i+1), Labels: map[string]string{key: "fabric." + name, "pool": "gb200"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{gpuTaint}},
			Status: corev1.NodeStatus{Capacity: res, Allocatable: res,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		})
	}
	return nodes
}

// pod is a bound pod requesting gpus on a node.
func pod(ns, name, node string, gpus int64, labels map[string]string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{placement.GPU: *resource.NewQuantity(gpus, resource.DecimalSI)},
			Limits:   corev1.ResourceList{placement.GPU: *resource.NewQuantity(gpus, resource.DecimalSI)},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// workers are n TP4 workers that select the pool and tolerate the GPU taint.
func workers(n int) []placement.Worker {
	spec := pod("", "", "", 4, nil).Spec
	spec.NodeName = ""
	spec.NodeSelector = map[string]string{"pool": "gb200"}
	spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	out := make([]placement.Worker, n)
	for i := range out {
		out[i] = placement.Worker{Role: "Worker", Spec: spec}
	}
	return out
}

// othersOn fills the first n trays of a rack with another team's pods.
func othersOn(nodes []corev1.Node, n int) []corev1.Pod {
	var pods []corev1.Pod
	for i := range n {
		pods = append(pods, pod("team-b", fmt.Sprintf("train-%s", nodes[i].Name), nodes[i].Name, 4, nil))
	}
	return pods
}

func TestTheGraphGoesToTheOnlyCliqueWithRoomForEveryWorker(t *testing.T) {
	a, b := rack("a", 4), rack("b", 4)
	// a: 2 free trays (8 GPUs, what the scheduler's spreading favours); b: 3 free (12 GPUs).
	pool := placement.Pool{Nodes: append(a, b...), Pods: append(othersOn(a, 2), othersOn(b, 1)...)}
	res := placement.Place(pool, placement.Request{TopologyKey: key, Workers: workers(3)})
	require.True(t, res.Fits(), res.Table())
	assert.Equal(t, "fabric.b", res.Chosen)
	da, _ := res.Domain("fabric.a")
	db, _ := res.Domain("fabric.b")
	assert.Equal(t, placement.Domain{Name: "fabric.a", Trays: 4, FreeGPUs: 8, Holds: 2}, da)
	assert.Equal(t, placement.Domain{Name: "fabric.b", Trays: 4, FreeGPUs: 12, Holds: 3}, db)
}

func TestTwoCliquesEachTooSmallAreRefusedWithTheirTable(t *testing.T) {
	a, b := rack("a", 4), rack("b", 4)
	pool := placement.Pool{Nodes: append(a, b...), Pods: append(othersOn(a, 2), othersOn(b, 2)...)}
	res := placement.Place(pool, placement.Request{TopologyKey: key, Workers: workers(3)})
	assert.False(t, res.Fits())
	assert.Empty(t, res.Chosen)
	table := res.Table()
	assert.Contains(t, table, "CLIQUE (nvidia.com/gpu.clique)")
	assert.Regexp(t, `fabric\.a\s+4\s+8\s+2 of 3 workers`, table)
	assert.Regexp(t, `fabric\.b\s+4\s+8\s+2 of 3 workers`, table)
}

func TestCordonedNotReadyUnlabelledAndUntoleratedTraysAreNotCounted(t *testing.T) {
	a := rack("a", 6)
	// Drained for maintenance, and lost, as kube-controller-manager leaves them: tainted by the
	// node lifecycle controller too, which the fit reads as the state it is.
	a[0].Spec.Unschedulable = true
	a[0].Spec.Taints = append(a[0].Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	a[1].Status.Conditions[0].Status, a[1].Status.Conditions[0].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
	a[1].Spec.Taints = append(a[1].Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
	delete(a[2].Labels, key) // fabric manager not initialised
	a[3].Spec.Taints = append(a[3].Spec.Taints, corev1.Taint{Key: "team-b/reserved", Value: "true", Effect: corev1.TaintEffectNoExecute})
	res := placement.Place(placement.Pool{Nodes: a}, placement.Request{TopologyKey: key, Workers: workers(3)})
	assert.False(t, res.Fits(), "two usable trays for three workers")
	d, _ := res.Domain("fabric.a")
	assert.Equal(t, 2, d.Trays)
	assert.Equal(t, map[string]int{placement.ExcludedCordoned: 1, placement.ExcludedNotReady: 1, placement.ExcludedNoKey: 1, placement.ExcludedTainted: 1}, res.Excluded)
	assert.Contains(t, res.Table(), "not counted: 1 cordoned, 1 not Ready, 1 tainted against the workers, 1 without the label nvidia.com/gpu.clique")
	assert.Equal(t, []placement.Tray{
		{Domain: "fabric.a", Node: a[0].Name, State: "cordoned"},
		{Domain: "fabric.a", Node: a[1].Name, State: "not Ready (Ready is Unknown: NodeStatusUnknown)"},
		{Domain: "fabric.a", Node: a[3].Name, State: "tainted team-b/reserved=true:NoExecute"},
	}, res.Trays("fabric.a"), "the clique's trays out of service, each with its state")

	// A PreferNoSchedule taint does not keep a pod off a node.
	a[3].Spec.Taints[1].Effect = corev1.TaintEffectPreferNoSchedule
	a[2].Labels[key] = "fabric.a"
	res = placement.Place(placement.Pool{Nodes: a}, placement.Request{TopologyKey: key, Workers: workers(4)})
	assert.True(t, res.Fits(), res.Table())
}

func TestTheGraphStaysInTheCliqueItRunsIn(t *testing.T) {
	a, b := rack("a", 7), rack("b", 3)
	own := map[string]string{"graph": "g"}
	// The graph's three workers run in a, beside another team's three and one free tray (16 GPUs
	// for the graph); b has exactly room for three (12: the tighter fit for a new graph).
	pods := []corev1.Pod{pod("ns", "w-0", a[0].Name, 4, own), pod("ns", "w-1", a[1].Name, 4, own), pod("ns", "w-2", a[2].Name, 4, own)}
	pods = append(pods, othersOn(a[3:], 3)...)
	req := placement.Request{TopologyKey: key, Workers: workers(3), Previous: "fabric.a",
		Own: func(p *corev1.Pod) bool { return p.Namespace == "ns" && p.Labels["graph"] == "g" }}
	res := placement.Place(placement.Pool{Nodes: append(a, b...), Pods: pods}, req)
	require.True(t, res.Fits(), res.Table())
	assert.Equal(t, "fabric.a", res.Chosen, "its own workers' GPUs are its room")

	// A new graph takes the tightest clique that holds it.
	fresh := placement.Place(placement.Pool{Nodes: append(a, b...), Pods: pods}, placement.Request{TopologyKey: key, Workers: workers(3)})
	assert.Equal(t, "fabric.b", fresh.Chosen)

	// A fifth worker does not fit where it runs: refused, not moved to b.
	req.Workers = workers(5)
	res = placement.Place(placement.Pool{Nodes: append(a, b...), Pods: pods}, req)
	assert.False(t, res.Fits())
	assert.Empty(t, res.Chosen)
}

func TestWithoutATopologyKeyThePoolIsOneDomain(t *testing.T) {
	a, b := rack("a", 2), rack("b", 1)
	res := placement.Place(placement.Pool{Nodes: append(a, b...)}, placement.Request{Workers: workers(3)})
	require.True(t, res.Fits(), res.Table())
	assert.Empty(t, res.Chosen)
	assert.Contains(t, res.Table(), "(all nodes)")
	res = placement.Place(placement.Pool{Nodes: append(a, b...)}, placement.Request{Workers: workers(4)})
	assert.False(t, res.Fits())
}

func TestFinishedAndUnboundPodsHoldNothing(t *testing.T) {
	a := rack("a", 3)
	done := pod("team-b", "done", a[0].Name, 4, nil)
	done.Status.Phase = corev1.PodSucceeded
	pending := pod("team-b", "pending", "", 4, nil)
	res := placement.Place(placement.Pool{Nodes: a, Pods: []corev1.Pod{done, pending}}, placement.Request{TopologyKey: key, Workers: workers(3)})
	assert.True(t, res.Fits(), res.Table())
}

func TestAGPUTaintIsToleratedAsExtendedResourceTolerationDoes(t *testing.T) {
	w := workers(3)
	for i := range w {
		w[i].Spec.Tolerations = nil // the recipe's workers: no toleration of their own
	}
	res := placement.Place(placement.Pool{Nodes: rack("a", 3)}, placement.Request{TopologyKey: key, Workers: w})
	assert.True(t, res.Fits(), res.Table())
}

func TestAGPUNodeTooSmallForAWorkerIsNamedNotIgnored(t *testing.T) {
	w := workers(3)
	for i := range w {
		rdma := corev1.ResourceList{placement.GPU: resource.MustParse("4"), "rdma.example.com/device": resource.MustParse("1")}
		w[i].Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rdma, Limits: rdma}
	}
	res := placement.Place(placement.Pool{Nodes: rack("a", 3)}, placement.Request{TopologyKey: key, Workers: w})
	assert.False(t, res.Empty(), "GPU nodes are there: not a pool scaled to zero")
	assert.False(t, res.Fits())
	assert.Equal(t, 3, res.Excluded[placement.ExcludedTooSmall])
	assert.Contains(t, res.Table(), "3 too small for a worker")
}

// A node that could never hold a worker (a control-plane or system node, tainted for its own pods)
// is not counted as tainted against the workers: a pool whose GPU trays are scaled to zero is
// empty, not a pool of tainted nodes.
func TestASystemNodeIsNotATaintedTray(t *testing.T) {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")}
	cp := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "control-plane-1", Labels: map[string]string{"pool": "gb200"}},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: res, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	got := placement.Place(placement.Pool{Nodes: []corev1.Node{cp}}, placement.Request{TopologyKey: key, Workers: workers(3)})
	assert.True(t, got.Empty(), "nothing to choose from: %v", got.Excluded)
	assert.Zero(t, got.Excluded[placement.ExcludedTainted])
	assert.Empty(t, got.OutOfService)
}
