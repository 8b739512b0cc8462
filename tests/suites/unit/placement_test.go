package unit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/components"
	"minimax-m3/manifest"
	"minimax-m3/placement"
)

// poolCluster is fakeCluster with a pool of nodes and pods to place the graph in; it plays the
// API server's answers to the program's two list calls (internal/cluster.Reader.Pool, which the
// rack box tests run for real).
type poolCluster struct {
	fakeCluster
	pool placement.Pool
}

func (p poolCluster) Pool(context.Context) (placement.Pool, error) { return p.pool, nil }

const clique = "nvidia.com/gpu.clique"

// gb200Rack is a rack of 4-GPU trays as a managed GB200 pool registers them: GPU and arm64 taints,
// the clique label, Ready.
func gb200Rack(name string, trays int) []corev1.Node {
	var nodes []corev1.Node
	for i := range trays {
		res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("140"), corev1.ResourceMemory: resource.MustParse("880Gi"), placement.GPU: resource.MustParse("4")}
		nodes = append(nodes, corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-tray-%02d", name, i+1), Labels: map[string]string{clique: "fabric." + name, "kubernetes.io/arch": "arm64"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{
				{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule},
				{Key: "kubernetes.io/arch", Value: "arm64", Effect: corev1.TaintEffectNoSchedule},
			}},
			Status: corev1.NodeStatus{Allocatable: res, Capacity: res, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		})
	}
	return nodes
}

// teamPods are another team's pods holding every GPU of the first n trays.
func teamPods(nodes []corev1.Node, n int) []corev1.Pod {
	var pods []corev1.Pod
	for _, node := range nodes[:n] {
		pods = append(pods, corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "job-" + node.Name},
			Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{placement.GPU: resource.MustParse("4")}, Limits: corev1.ResourceList{placement.GPU: resource.MustParse("4")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	return pods
}

func graphAnnotations(t *testing.T, r *result) map[string]string {
	return decode[map[string]string](t, r.customResource(t, "DynamoGraphDeployment"), "metadata", "annotations")
}

// The workers' node affinity terms, as the graph's pod templates carry them.
func workerCliques(t *testing.T, r *result) map[string][]corev1.NodeSelectorRequirement {
	out := map[string][]corev1.NodeSelectorRequirement{}
	for _, c := range graphSpec(t, r).Components[1:] {
		out[c.Name] = requiredTerms(c.PodTemplate.Spec)
		require.NotEmpty(t, out[c.Name], c.Name)
	}
	return out
}

func TestWorkersArePinnedToTheOneCliqueWithRoomForAllOfThem(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			// Two racks of one pool: a has room for half the graph (the trays the scheduler's
			// spreading favours), b for all of it.
			need := p.gpus / 4
			a, b := gb200Rack("a", need), gb200Rack("b", need+2)
			cluster := poolCluster{fakeCluster{}, placement.Pool{Nodes: append(a, b...), Pods: append(teamPods(a, need/2), teamPods(b, 2)...)}}
			overrides := map[string]string{}
			if p.stack == "agg" {
				overrides["minimax-m3:placement"] = `{"topologyKey": "nvidia.com/gpu.clique"}`
			}
			r, err := runWith(t, components.Options{Cluster: cluster}, p.stack, overrides)
			require.NoError(t, err)
			for role, exprs := range workerCliques(t, r) {
				assert.Contains(t, exprs, corev1.NodeSelectorRequirement{Key: clique, Operator: corev1.NodeSelectorOpIn, Values: []string{"fabric.b"}}, role)
			}
			assert.Equal(t, clique+"=fabric.b", graphAnnotations(t, r)[manifest.PlacementAnnotation])
			assert.Equal(t, "false", graphAnnotations(t, r)["nvidia.com/enable-grove"], "the operator's component path, never Grove")
		})
	}
}

func TestNoCliqueWithRoomIsRefusedBeforeAnythingIsCreated(t *testing.T) {
	a, b := gb200Rack("a", 4), gb200Rack("b", 4)
	cluster := poolCluster{fakeCluster{}, placement.Pool{Nodes: append(a, b...), Pods: append(teamPods(a, 2), teamPods(b, 1)...)}}
	// disagg needs six 4-GPU trays in one clique; a has 2 free, b 3.
	r, err := runWith(t, components.Options{Cluster: cluster}, "disagg", nil)
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "minimax-m3:placement.topologyKey: no NVLink clique has room for the graph's 6 workers (PrefillWorker 4 nvidia.com/gpu, DecodeWorker 4 nvidia.com/gpu each)")
	assert.Regexp(t, `fabric\.a\s+4\s+8\s+2 of 6 workers`, msg)
	assert.Regexp(t, `fabric\.b\s+4\s+12\s+3 of 6 workers`, msg)
	assert.Contains(t, msg, "nothing was changed")
	for _, res := range r.resources {
		assert.NotContains(t, res.Type, "kubernetes:", "nothing is registered: %s %s", res.Type, res.Name)
	}

	// The check can be turned off (the scheduler alone decides, as the recipe does).
	_, err = runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:placement": `{"check": false}`})
	require.NoError(t, err)
}

func TestTraysWithoutTheCliqueLabelAreNamed(t *testing.T) {
	a := gb200Rack("a", 8)
	for _, n := range a {
		delete(n.Labels, clique)
	}
	_, err := runWith(t, components.Options{Cluster: poolCluster{fakeCluster{}, placement.Pool{Nodes: a}}}, "disagg", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no node the workers may use carries the label nvidia.com/gpu.clique: is GPU feature discovery running")
	assert.Contains(t, err.Error(), "not counted: 8 without the label nvidia.com/gpu.clique")
}

func TestARunningGraphStaysInItsClique(t *testing.T) {
	a, b := gb200Rack("a", 9), gb200Rack("b", 6)
	ns := "inference"
	var pods []corev1.Pod
	// The graph's six workers run on a; another team has two of a's trays, one is free (28 GPUs
	// for the graph). b has exactly six free trays (24): the tighter fit for a new graph.
	for i, role := range []string{"PrefillWorker", "PrefillWorker", "PrefillWorker", "DecodeWorker", "DecodeWorker", "DecodeWorker"} {
		p := teamPods(a[i:], 1)[0]
		p.Namespace, p.Name = ns, fmt.Sprintf("w-%d", i)
		p.Labels = map[string]string{"nvidia.com/dynamo-graph-deployment-name": "minimax-m3-disagg-gb200-agentic", "nvidia.com/dynamo-component": role}
		pods = append(pods, p)
	}
	pods = append(pods, teamPods(a[6:], 2)...)
	graph := "dynamographdeployments/" + ns + "/minimax-m3-disagg-gb200-agentic"
	live := fakeCluster{graph: {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "disagg",
		"@" + manifest.PlacementAnnotation: clique + "=fabric.a"}}
	cluster := poolCluster{live, placement.Pool{Nodes: append(a, b...), Pods: pods}}

	r, err := runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:decodeWorker": `{"vllm": {"maxNumSeqs": 48}}`})
	require.NoError(t, err)
	assert.Equal(t, clique+"=fabric.a", graphAnnotations(t, r)[manifest.PlacementAnnotation], "a flag change does not move the graph")

	// The pin holds where the pool cannot be read or the check is off.
	r, err = runWith(t, components.Options{Cluster: live}, "disagg", map[string]string{"minimax-m3:placement": `{"check": false}`})
	require.NoError(t, err)
	assert.Equal(t, clique+"=fabric.a", graphAnnotations(t, r)[manifest.PlacementAnnotation])
	for role, exprs := range workerCliques(t, r) {
		assert.Contains(t, exprs, corev1.NodeSelectorRequirement{Key: clique, Operator: corev1.NodeSelectorOpIn, Values: []string{"fabric.a"}}, role)
	}

	// Without the annotation (a graph adopted, or deployed before placement), the graph is not
	// pinned: a pin would restart every worker. Its workers' clique is where it fits.
	delete(live[graph], "@"+manifest.PlacementAnnotation)
	r, err = runWith(t, components.Options{Cluster: cluster}, "disagg", nil)
	require.NoError(t, err)
	assert.Empty(t, graphAnnotations(t, r)[manifest.PlacementAnnotation])
	for _, c := range graphSpec(t, r).Components[1:] {
		assert.Nil(t, c.PodTemplate.Spec.Affinity.NodeAffinity, c.Name)
	}

	// Two more workers do not fit where the graph runs (one more does): refused, not moved.
	live[graph]["@"+manifest.PlacementAnnotation] = clique + "=fabric.a"
	_, err = runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:decodeWorker": `{"replicas": 4}`})
	require.NoError(t, err)
	_, err = runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:decodeWorker": `{"replicas": 5}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:placement.clique: the graph runs in clique nvidia.com/gpu.clique=fabric.a, which holds 7 of its 8 workers")
	assert.Regexp(t, `fabric\.b\s+6\s+24\s+6 of 8 workers`, err.Error(), "the other cliques are shown, to move to")

	// Moving it is explicit.
	r, err = runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:placement": `{"clique": "fabric.b"}`})
	require.NoError(t, err)
	assert.Equal(t, clique+"=fabric.b", graphAnnotations(t, r)[manifest.PlacementAnnotation])
}

func TestAGraphTheOperatorRunsThroughGroveIsRefused(t *testing.T) {
	graph := "dynamographdeployments/inference/minimax-m3-agg-gb200-agentic"
	live := fakeCluster{graph: {"@nvidia.com/workload-provider": "grove"}}
	_, err := runWith(t, components.Options{Cluster: live}, "agg", map[string]string{"minimax-m3:adopt": "true"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `minimax-m3:graphName: the Dynamo operator runs DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic through "grove"`)
	live[graph]["@nvidia.com/workload-provider"] = "component"
	_, err = runWith(t, components.Options{Cluster: live}, "agg", map[string]string{"minimax-m3:adopt": "true"})
	require.NoError(t, err)
}

func TestADisruptionBudgetPerWorkerRole(t *testing.T) {
	r := mustRun(t, "disagg", nil)
	pdbs := r.byType("kubernetes:policy/v1:PodDisruptionBudget")
	require.Len(t, pdbs, 2)
	for _, role := range []string{"PrefillWorker", "DecodeWorker"} {
		spec := decode[map[string]any](t, r.named(t, "kubernetes:policy/v1:PodDisruptionBudget", "disruption-budget-"+strings.ToLower(role)), "spec")
		assert.EqualValues(t, 1, spec["maxUnavailable"], role)
		assert.Equal(t, map[string]any{"matchLabels": map[string]any{
			"nvidia.com/dynamo-graph-deployment-name": "minimax-m3-disagg-gb200-agentic", "nvidia.com/dynamo-component": role,
		}}, spec["selector"], role)
	}
	assert.Empty(t, mustRun(t, "disagg", map[string]string{"minimax-m3:placement": `{"disruptionBudget": false}`}).byType("kubernetes:policy/v1:PodDisruptionBudget"))
}

func TestWorkersTolerateAStockGB200Pool(t *testing.T) {
	for _, p := range profiles {
		for _, c := range graphSpec(t, mustRun(t, p.stack, nil)).Components[1:] {
			assert.Equal(t, []corev1.Toleration{
				{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"},
				{Key: "kubernetes.io/arch", Operator: "Equal", Value: "arm64", Effect: "NoSchedule"},
			}, c.PodTemplate.Spec.Tolerations, c.Name)
		}
	}
}

func TestAPoolWithNoNodeForTheWorkersLeavesPlacementToTheScheduler(t *testing.T) {
	// A GPU pool scaled to zero: only CPU nodes, which no worker may use.
	cpu := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-1"}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	r, err := runWith(t, components.Options{Cluster: poolCluster{fakeCluster{}, placement.Pool{Nodes: []corev1.Node{cpu}}}}, "disagg", nil)
	require.NoError(t, err)
	assert.Empty(t, graphAnnotations(t, r)[manifest.PlacementAnnotation], "no clique chosen")
}

func TestARenamedGraphCountsTheGPUsOfTheGraphItReplaces(t *testing.T) {
	// A full rack: the stack's graph under its old name holds every GPU; the new name deletes it first.
	a := gb200Rack("a", 3)
	var pods []corev1.Pod
	for i := range a {
		p := teamPods(a[i:], 1)[0]
		p.Namespace, p.Name = "inference", fmt.Sprintf("old-%d", i)
		p.Labels = map[string]string{"nvidia.com/dynamo-graph-deployment-name": "mm3-old", "nvidia.com/dynamo-component": "Worker"}
		pods = append(pods, p)
	}
	cluster := poolCluster{fakeCluster{}, placement.Pool{Nodes: a, Pods: pods}}
	overrides := map[string]string{"minimax-m3:placement": `{"topologyKey": "nvidia.com/gpu.clique"}`}
	_, err := runWith(t, components.Options{Cluster: cluster}, "agg", overrides)
	require.Error(t, err, "a new stack does not own the old graph's GPUs")
	r, err := runPrevious(t, map[string]string{"namespace": "inference", "graphName": "mm3-old"}, components.Options{Cluster: cluster}, "agg", overrides)
	require.NoError(t, err)
	assert.Equal(t, clique+"=fabric.a", graphAnnotations(t, r)[manifest.PlacementAnnotation])
}

func TestAnUpdateThatMovesNoWorkerIsNotRefusedForTheRoomItWouldNeed(t *testing.T) {
	// The graph runs pinned to a, one worker on a tray drained since: anew, a holds 5 of 6. The
	// tray is cordoned the way kubectl leaves it, with the node lifecycle controller's taint.
	a := gb200Rack("a", 6)
	a[0].Spec.Unschedulable = true
	a[0].Spec.Taints = append(a[0].Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	ns, name := "inference", "minimax-m3-disagg-gb200-agentic"
	var pods []corev1.Pod
	for i, role := range []string{"PrefillWorker", "PrefillWorker", "PrefillWorker", "DecodeWorker", "DecodeWorker", "DecodeWorker"} {
		p := teamPods(a[i:], 1)[0]
		p.Namespace, p.Name = ns, fmt.Sprintf("w-%d", i)
		p.Labels = map[string]string{"nvidia.com/dynamo-graph-deployment-name": name, "nvidia.com/dynamo-component": role}
		pods = append(pods, p)
	}
	graph := "dynamographdeployments/" + ns + "/" + name
	annotations := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "disagg",
		"@" + manifest.PlacementAnnotation: clique + "=fabric.a"}
	// The live graph's worker digests are those of this very config: the update changes the
	// frontend only.
	base, err := runWith(t, components.Options{Cluster: poolCluster{fakeCluster{graph: annotations}, placement.Pool{Nodes: gb200Rack("a", 6)}}}, "disagg", nil)
	require.NoError(t, err)
	for k, v := range graphAnnotations(t, base) {
		if strings.HasPrefix(k, "minimax-m3.io/template-") {
			annotations["@"+k] = v
		}
	}
	cluster := poolCluster{fakeCluster{graph: annotations}, placement.Pool{Nodes: a, Pods: pods}}
	_, err = runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:frontend": `{"replicas": 2}`})
	require.NoError(t, err, "the workers stay where they run")
	// Drained: the worker was evicted, its replacement is Pending (bound to no node).
	drained := cluster
	drained.pool.Pods = append([]corev1.Pod{}, pods...)
	drained.pool.Pods[0].Spec.NodeName, drained.pool.Pods[0].Status.Phase = "", corev1.PodPending
	_, err = runWith(t, components.Options{Cluster: drained}, "disagg", map[string]string{"minimax-m3:frontend": `{"replicas": 2}`})
	require.NoError(t, err, "a drained worker's Pending replacement is still one of the graph's workers")

	// A worker change places them anew: refused, naming the clique it runs in.
	_, err = runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:decodeWorker": `{"vllm": {"maxNumSeqs": 48}}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:placement.clique: the graph runs in clique nvidia.com/gpu.clique=fabric.a, which holds 5 of its 6 workers")
	assert.Contains(t, err.Error(), "not counted: 1 cordoned")
	// Which of its trays, and the choices.
	assert.Contains(t, err.Error(), "with its trays out of service: "+a[0].Name+" cordoned; wait for them to return, uncordon one (kubectl uncordon <node>)")
	assert.Contains(t, err.Error(), "or shrink the graph (prefillWorker.replicas, decodeWorker.replicas)")
	// And the key the user changed, beside the key refused.
	assert.Contains(t, err.Error(), "refused now because this update rolls the DecodeWorker pods (their template changes: a decodeWorker.* key")

	// Moving the graph to a clique without room: refused under placement.clique, which is the key
	// that rolls the workers too (not a worker's key).
	_, err = runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:placement.clique": "fabric.b"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:placement.clique: clique "+clique+"=fabric.b holds 0 of the graph's 6 workers")
	assert.Contains(t, err.Error(), `refused now because placement.clique moves the PrefillWorker pods from clique "fabric.a" to "fabric.b" (every worker restarts)`)
}

func TestTheBudgetLetsADrainEvictPastACrashingWorker(t *testing.T) {
	for _, pdb := range mustRun(t, "agg", nil).byType("kubernetes:policy/v1:PodDisruptionBudget") {
		assert.Equal(t, "AlwaysAllow", decode[map[string]any](t, pdb, "spec")["unhealthyPodEvictionPolicy"])
	}
}

func TestAPodTemplatePatchCannotDropThePin(t *testing.T) {
	a := gb200Rack("a", 6)
	for i := range a {
		a[i].Labels["zone"] = "z1"
	}
	cluster := poolCluster{fakeCluster{}, placement.Pool{Nodes: a}}
	r, err := runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{
		"minimax-m3:decodeWorker": `{"podTemplatePatch": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}}}}`,
	})
	require.NoError(t, err)
	exprs := workerCliques(t, r)["DecodeWorker"]
	assert.Contains(t, exprs, corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}})
	assert.Contains(t, exprs, corev1.NodeSelectorRequirement{Key: clique, Operator: corev1.NodeSelectorOpIn, Values: []string{"fabric.a"}})
}
