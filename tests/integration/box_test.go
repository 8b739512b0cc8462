package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/rackbox"
)

// The tests in this file run in the rack box (boxharness_test.go): nothing of the cluster is
// played by the test. The Deployment, ReplicaSet, Job, garbage-collection, namespace, PV and
// ResourceClaim controllers are kube-controller-manager's, placement is kube-scheduler's, the
// graph is the real Dynamo operator's. What the box plays (the kubelet through kwok, the DRA
// kubelet plugin's ResourceSlices, GPUs, the compute-domain-controller's channel template and
// finalizer, a storage provisioner) is listed in package rackbox.

const graphLabelKey = "nvidia.com/dynamo-graph-deployment-name"

// Both stacks from an empty NVL72 rack to Ready with the real scheduler and controllers: the claim
// bound by the PV controller, the download Job completed by the Job controller on a CPU node, every
// worker on a GPU tray of the rack, one per tray, all in the rack's NVLink clique, each with its
// ComputeDomain channel claim allocated by the scheduler's DRA plugin on its own tray, the
// frontend on a CPU node, the smoke test's Job run (its result set by a kwok stage: no model runs
// here), and the operator's Ready. Then destroy leaves only what the README says it keeps: the
// cache claim (and the namespace holding it), with the operator's and the ComputeDomain's
// finalizers handled by their controllers.
func TestBoxBothStacksFromAnEmptyRackToReady(t *testing.T) {
	for _, tc := range []struct {
		stack, graph string
		workers      int
	}{{"agg", aggGraph, 3}, {"disagg", disaggGraph, 6}} {
		t.Run(tc.stack, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := addRack(t, rackbox.NVL72("nvl72-"+tc.stack))
			ns := "box-" + tc.stack
			s := newBoxStack(t, tc.stack, ns, r, nil)
			res, _, err := s.up(ctx)
			require.NoError(t, err, s.log.String())

			pvc := &corev1.PersistentVolumeClaim{}
			require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared-model-cache"}, pvc))
			assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase, "bound by the PV controller")
			assert.Equal(t, rackbox.StorageClass, *pvc.Spec.StorageClassName, "the cluster's default class")

			job := &batchv1.Job{}
			require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minimax-m3-model-download"}, job))
			assert.Equal(t, int32(1), job.Status.Succeeded)
			assert.True(t, jobCondition(job, batchv1.JobComplete), "completed by the Job controller: %v", job.Status.Conditions)
			for _, p := range podsOf(t, ns, client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}) {
				assert.True(t, strings.HasPrefix(p.Spec.NodeName, "cpu-"), "the download ran on a CPU node, not %s", p.Spec.NodeName)
			}

			pods := podsOf(t, ns, client.MatchingLabels{graphLabelKey: tc.graph})
			trays := map[string]bool{}
			for _, p := range pods {
				require.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s", p.Name)
				if p.Labels["nvidia.com/dynamo-component"] == "Frontend" {
					assert.True(t, strings.HasPrefix(p.Spec.NodeName, "cpu-"), "the frontend runs on a CPU node, not %s", p.Spec.NodeName)
					continue
				}
				require.True(t, slices.Contains(r.NodeNames(), p.Spec.NodeName), "worker %s on the rack's trays, not %s", p.Name, p.Spec.NodeName)
				trays[p.Spec.NodeName] = true
				node := &corev1.Node{}
				require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node))
				assert.Equal(t, r.Clique(), node.Labels[rackbox.CliqueLabel])
				require.NotNil(t, p.Spec.Affinity.PodAffinity, "placement.topologyKey makes a required pod affinity")
				assert.Equal(t, rackbox.CliqueLabel, p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey)
				assertChannelAllocated(t, &p)
			}
			assert.Len(t, trays, tc.workers, "one TP4 worker per 4-GPU tray")

			g := &unstructured.Unstructured{}
			g.SetGroupVersionKind(graphGVK)
			require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.graph}, g))
			status, reason, _, gen := readyCondition(g)
			assert.Equal(t, []any{"True", "all_resources_are_ready", g.GetGeneration()}, []any{status, reason, gen}, "Ready written by the operator")
			smoke, _ := res.Outputs["smokeTest"].Value.(map[string]any)
			assert.Equal(t, true, smoke["passed"], "the smoke test ran: %v", res.Outputs["smokeTest"].Value)
			assert.Contains(t, smoke["reply"], "kwok stage", "its result is the pod's termination message, set by the box")

			_, err = s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
			require.NoError(t, err, s.log.String())
			eventually(t, func() bool { return len(podsOf(t, ns, nil)) == 0 }, 2*time.Minute, "every pod is gone (garbage collector, kwok)")
			for _, kind := range []client.ObjectList{&appsv1.DeploymentList{}, &batchv1.JobList{}, &resourcev1.ResourceClaimList{}, &resourcev1.ResourceClaimTemplateList{}} {
				require.NoError(t, box.Client.List(ctx, kind, client.InNamespace(ns)))
				assert.Zero(t, meta.LenList(kind), "%T left in %s", kind, ns)
			}
			for _, gvk := range []schema.GroupVersionKind{graphGVK, computeDomainGVK} {
				var list unstructured.UnstructuredList
				list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
				require.NoError(t, box.Client.List(ctx, &list, client.InNamespace(ns)))
				assert.Empty(t, list.Items, "%v left in %s", gvk, ns)
			}
			require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared-model-cache"}, pvc), "destroy keeps the cache claim")
			assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase)
			nsObj := &corev1.Namespace{}
			require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Name: ns}, nsObj), "and the namespace that holds it")
			assert.Nil(t, nsObj.DeletionTimestamp)
		})
	}
}

// assertChannelAllocated checks that a worker's ComputeDomain channel claim was allocated by the
// scheduler: the channel device of its own tray's pool, reserved for the pod.
func assertChannelAllocated(t *testing.T, p *corev1.Pod) {
	t.Helper()
	require.Len(t, p.Status.ResourceClaimStatuses, 1, "pod %s has its generated channel claim", p.Name)
	claim := &resourcev1.ResourceClaim{}
	require.NoError(t, box.Client.Get(context.Background(), client.ObjectKey{Namespace: p.Namespace, Name: *p.Status.ResourceClaimStatuses[0].ResourceClaimName}, claim))
	require.NotNil(t, claim.Status.Allocation, "claim %s allocated", claim.Name)
	results := claim.Status.Allocation.Devices.Results
	require.Len(t, results, 1)
	assert.Equal(t, []string{rackbox.ComputeDomainDriver, p.Spec.NodeName, "channel-0"}, []string{results[0].Driver, results[0].Pool, results[0].Device})
	assert.True(t, slices.ContainsFunc(claim.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == p.UID }), "reserved for %s", p.Name)
}

func jobCondition(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	return slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool { return c.Type == typ && c.Status == corev1.ConditionTrue })
}

// On a rack with exactly the GPUs the stack needs, the recipe's rollout (the operator's default,
// worker.rollout.strategy OperatorDefault): a vLLM flag change makes the operator start a new
// worker before it stops an old one (25% surge of 3 is 1), and the real scheduler leaves that pod
// Pending for lack of GPUs, with its reason, which `up` shows while it waits; the old workers keep
// serving, and `up` ends at readiness.timeout.
func TestBoxFullRackRecipeRolloutWaitsForAGPU(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := "box-full-recipe"
	s := readyBoxStack(t, "agg", ns, rackbox.NVL72("full-recipe").WithGPUs(12), auto.ConfigMap{"minimax-m3:worker.rollout.strategy": {Value: "OperatorDefault"}})
	var err error
	workers := client.MatchingLabels{graphLabelKey: aggGraph, "nvidia.com/dynamo-component": "Worker"}
	require.Len(t, podsOf(t, ns, workers), 3)

	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "48")
	s.set(ctx, "minimax-m3:readiness.timeout", "40s")
	_, _, err = s.up(ctx)
	require.Error(t, err, "the rollout cannot finish on a full rack")

	var pending *corev1.Pod
	for _, p := range podsOf(t, ns, workers) {
		if p.Spec.NodeName == "" {
			pending = &p
		}
	}
	require.NotNil(t, pending, "the operator's surge pod exists")
	scheduled := podCondition(pending, corev1.PodScheduled)
	require.NotNil(t, scheduled)
	assert.Equal(t, corev1.PodReasonUnschedulable, scheduled.Reason)
	assert.Contains(t, scheduled.Message, "Insufficient nvidia.com/gpu", "the scheduler's own reason")
	assert.Contains(t, s.log.String(), "cannot be scheduled: Unschedulable: 0/", "up shows the scheduler's reason while it waits")
	assert.Contains(t, s.log.String(), "Insufficient nvidia.com/gpu")
	assert.Contains(t, s.log.String(), "minimax-m3:worker.rollout: this update replaces Worker's pods, and its rollout starts 1 pod(s) (4 GPUs) beside its 3",
		"up warned before it started")
	running := 0
	for _, p := range podsOf(t, ns, workers) {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	assert.Equal(t, 3, running, "the old workers keep serving: the default rollout takes none down first")
}

// On the same full rack, the program's default rollout (worker.rollout: RollingUpdate, maxSurge 0,
// maxUnavailable 1) finishes the same flag change: the operator stops one old worker before it
// starts each new one, so no pod ever needs a spare GPU slot, and `up` returns once the graph is
// Ready at the new generation with every worker replaced.
func TestBoxFullRackFlagChangeRollsWithoutASpareGPU(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := "box-full-default"
	s := readyBoxStack(t, "agg", ns, rackbox.NVL72("full-default").WithGPUs(12), nil)
	var err error
	workers := client.MatchingLabels{graphLabelKey: aggGraph, "nvidia.com/dynamo-component": "Worker"}
	before := podsOf(t, ns, workers)
	require.Len(t, before, 3)

	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "48")
	_, _, err = s.up(ctx)
	require.NoError(t, err, "the rollout fits the full rack\n%s", s.log.String())
	after := podsOf(t, ns, workers)
	require.Len(t, after, 3)
	for _, p := range after {
		assert.Equal(t, corev1.PodRunning, p.Status.Phase)
		assert.NotEqual(t, before[0].Labels["pod-template-hash"], p.Labels["pod-template-hash"], "every worker replaced")
		assert.Contains(t, strings.Join(p.Spec.Containers[0].Args, " "), "--max-num-seqs 48")
	}
	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(graphGVK)
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph}, g))
	status, _, _, gen := readyCondition(g)
	assert.Equal(t, []any{"True", g.GetGeneration()}, []any{status, gen})

	// A restart together with a worker change: the operator supersedes the restart with the
	// rollout (or completes it first); either way `up` ends once the graph is Ready at its
	// generation, instead of waiting out readiness.timeout for a Completed that never comes.
	s.set(ctx, "minimax-m3:restart.id", "r1")
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "40")
	s.set(ctx, "minimax-m3:readiness.timeout", "150s")
	_, _, err = s.up(ctx)
	require.NoError(t, err, "up ends after a superseded restart\n%s", s.log.String())
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph}, g))
	phase, _, _ := unstructured.NestedString(g.Object, "status", "restart", "phase")
	observed, _, _ := unstructured.NestedString(g.Object, "status", "restart", "observedID")
	assert.Equal(t, "r1", observed)
	assert.Contains(t, []string{"Superseded", "Completed"}, phase)
	t.Logf("the operator's restart phase after a restart with a worker change: %s", phase)
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// A download pod that fails, and workers that do not fit the rack, each fail `up` with
// Kubernetes' own reason: the Job controller's BackoffLimitExceeded, the scheduler's Insufficient
// nvidia.com/gpu.
func TestBoxFailuresCarryKubernetesReasons(t *testing.T) {
	t.Run("download", func(t *testing.T) {
		t.Parallel()
		r := addRack(t, rackbox.NVL72("fail-dl").WithGPUs(12))
		s := newBoxStack(t, "agg", "box-fail-dl", r, auto.ConfigMap{
			"minimax-m3:modelDownload.image":        {Value: rackbox.FailingImage},
			"minimax-m3:modelDownload.backoffLimit": {Value: "0"},
		})
		_, _, err := s.up(context.Background())
		require.Error(t, err)
		assert.Contains(t, s.log.String(), "BackoffLimitExceeded", "the Job controller's reason\n%s", s.log.String())
	})
	t.Run("too few GPUs", func(t *testing.T) {
		t.Parallel()
		r := addRack(t, rackbox.NVL72("fail-gpu").WithGPUs(8))
		s := newBoxStack(t, "agg", "box-fail-gpu", r, auto.ConfigMap{"minimax-m3:readiness.timeout": {Value: "40s"}})
		_, _, err := s.up(context.Background())
		require.Error(t, err)
		assert.Contains(t, s.log.String(), "cannot be scheduled: Unschedulable: 0/", "the scheduler's verdict, in up's output\n%s", s.log.String())
		assert.Contains(t, s.log.String(), "Insufficient nvidia.com/gpu")
	})
}
