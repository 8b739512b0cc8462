package integration

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gaiev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"minimax-m3/components"
	kcluster "minimax-m3/internal/cluster"
	"minimax-m3/manifest"
	"minimax-m3/teamboundary"
	"minimax-m3/tests/framework/poll"
	"minimax-m3/tests/framework/rackbox"
)

// The tests in this file run in the rack box (boxharness_test.go): nothing of the cluster is
// played by the test. The Deployment, ReplicaSet, Job, garbage-collection, namespace, PV and
// ResourceClaim controllers are kube-controller-manager's, placement is kube-scheduler's, the
// graph is the real Dynamo operator's, the ComputeDomain's channel template and finalizer the
// NVIDIA DRA driver's compute-domain-controller's. What the box plays (the kubelet through kwok,
// the DRA kubelet plugin's ResourceSlices, GPUs, a storage provisioner) is listed in package
// rackbox and docs/development.md.

// Both stacks through a lifecycle on an empty NVL72 rack, nothing of the cluster played:
//
//  1. up: the claim bound by the PV controller; the graph created only once the download Job has
//     completed (the box holds its pod until the test ends it: the Job controller then completes
//     the Job), on a CPU node; every worker on a GPU tray of the rack, one per tray, all in the
//     rack's NVLink clique, each with its ComputeDomain channel claim allocated by the scheduler's
//     DRA plugin on its own tray; the frontend on a CPU node; the smoke test's Job run (its result
//     set by a kwok stage: no model runs here); the operator's Ready; the outputs; the live graph
//     exactly the program's spec for the stack's config, through the real CRD schema; the
//     Service the outputs name is the operator's, on their port (the disagg stack's namespace
//     makes the operator's Dynamo namespace label exactly 63 characters, the most the program's
//     validation lets through);
//  2. a second up and a preview --expect-no-changes change nothing;
//  3. a vLLM flag updates only the graph, and the operator rolls the workers;
//  4. synthetic acceptance changes only the workers' ConfigMap key, and says so;
//  5. a new model revision replaces the download Job and updates the graph, nothing else;
//  6. no plaintext token in the state, the outputs or the log;
//  7. destroy leaves only what docs/day-two.md says it keeps: the cache claim (and the namespace
//     holding it), with the operator's and the ComputeDomain's finalizers handled by their
//     controllers.
//
// Each stack's lifecycle is a test of its own, not a parallel subtest: parallel subtests wait for
// a free slot behind every top-level test, so the two longest box tests would start last.
func TestBoxStackLifecycleAgg(t *testing.T) {
	parallelOnBox(t)
	boxStackLifecycle(t, lifecycleCase{"agg", "box-agg", aggGraph, []string{"Worker"}, 12, "minimax-m3:worker.vllm.maxNumSeqs", false})
}

func TestBoxStackLifecycleDisagg(t *testing.T) {
	parallelOnBox(t)
	boxStackLifecycle(t, lifecycleCase{"disagg", "box-disagg-" + strings.Repeat("x", 63-len(disaggGraph)-1-len("box-disagg-")), disaggGraph,
		[]string{"PrefillWorker", "DecodeWorker"}, 24, "minimax-m3:prefillWorker.vllm.maxNumSeqs", true})
}

type lifecycleCase struct {
	stack, ns, graph string
	roles            []string
	gpus             float64
	flagKey          string
	// pool: the stack routes the site's Gateway to an InferencePool (exposure.backend
	// inferencePool) from its first up: the graph then has an endpoint picker and its workers
	// frontend sidecars.
	pool bool
}

func boxStackLifecycle(t *testing.T, tc lifecycleCase) {
	ctx := context.Background()
	r := addRack(t, rackbox.NVL72("nvl72-"+tc.stack))
	ns := tc.ns
	require.LessOrEqual(t, len(ns+"-"+tc.graph), 63)
	extra := auto.ConfigMap{"minimax-m3:modelDownload.image": {Value: rackbox.HeldImage}}
	if tc.pool {
		maps.Copy(extra, auto.ConfigMap{
			"minimax-m3:exposure.enabled": {Value: "true"}, "minimax-m3:exposure.backend": {Value: "inferencePool"},
			"minimax-m3:exposure.gateway.namespace": {Value: boxGatewayNamespace}, "minimax-m3:exposure.gateway.name": {Value: "inference"},
			"minimax-m3:exposure.gateway.sectionName": {Value: "https"}, "minimax-m3:exposure.hostname": {Value: "disagg.box.example"},
			"minimax-m3:exposure.endpointPicker.image": {Value: "nvcr.io/nvidia/ai-dynamo/dynamo-frontend:1.4.0"},
		})
	}
	s := newBoxStack(t, tc.stack, ns, r, extra)

	// 1. up, with the download held until the test ends it.
	type upResult struct {
		res auto.UpResult
		err error
	}
	done := make(chan upResult, 1)
	go func() {
		res, _, err := s.up(ctx)
		done <- upResult{res, err}
	}()
	release := heldDownload(t, ns)
	_, graphExists := getOn(t, box.Client, graphGVK, ns, tc.graph)
	assert.False(t, graphExists, "the graph waits for the download Job")
	select {
	case r := <-done:
		t.Fatalf("up returned before the download completed: %v", r.err)
	default:
	}
	release()
	var up upResult
	select {
	case up = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("up did not finish after the download completed")
	}
	require.NoError(t, up.err, s.log.String())
	res := up.res

	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared-model-cache"}, pvc))
	assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase, "bound by the PV controller")
	assert.Equal(t, rackbox.StorageClass, *pvc.Spec.StorageClassName, "the cluster's default class")
	assert.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, pvc.Spec.AccessModes)

	job := &batchv1.Job{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minimax-m3-model-download"}, job))
	assert.Equal(t, int32(1), job.Status.Succeeded)
	assert.True(t, jobCondition(job, batchv1.JobComplete), "completed by the Job controller: %v", job.Status.Conditions)
	for _, p := range podsOf(t, ns, client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}) {
		assert.True(t, strings.HasPrefix(p.Spec.NodeName, "cpu-"), "the download ran on a CPU node, not %s", p.Spec.NodeName)
	}
	// The box's site is installed, so the namespace the stack made enforces baseline (its workers
	// run, below, by the RuntimeClass the site's policy names and the box's API server exempts):
	// Pod Security admission itself refuses a pod beyond it, and the site's admission policy holds
	// a pod of the exempt class to what a worker may do.
	escape := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "escape"}, Spec: corev1.PodSpec{HostPID: true,
		Containers: []corev1.Container{{Name: "main", Image: rackbox.HeldImage}}}}
	err := box.Client.Create(ctx, escape.DeepCopy(), client.DryRunAll)
	require.Error(t, err, "a stack's namespace enforces baseline")
	assert.Contains(t, err.Error(), `violates PodSecurity "baseline:latest": host namespaces (hostPID=true)`)
	installTeamBoundary(t, ns)
	escape.Spec.RuntimeClassName = ptrTo(rackbox.WorkerRuntimeClass)
	err = box.Client.Create(ctx, escape, client.DryRunAll)
	require.Error(t, err, "the exempt RuntimeClass does not escape the site's policy in a stack's namespace")
	assert.Contains(t, err.Error(), teamboundary.PolicyName)
	assert.Contains(t, err.Error(), "Pod Security baseline: host namespaces")

	pods := podsOf(t, ns, client.MatchingLabels{graphLabelKey: tc.graph})
	trays := map[string]bool{}
	for _, p := range pods {
		require.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s", p.Name)
		if c := p.Labels["nvidia.com/dynamo-component"]; c == "Frontend" || c == manifest.EndpointPickerName {
			assert.True(t, strings.HasPrefix(p.Spec.NodeName, "cpu-"), "%s runs on a CPU node, not %s", c, p.Spec.NodeName)
			continue
		}
		require.True(t, slices.Contains(r.NodeNames(), p.Spec.NodeName), "worker %s on the rack's trays, not %s", p.Name, p.Spec.NodeName)
		assert.Equal(t, rackbox.WorkerRuntimeClass, ptrValue(p.Spec.RuntimeClassName), "worker %s takes the class the site's policy names", p.Name)
		trays[p.Spec.NodeName] = true
		node := &corev1.Node{}
		require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node))
		assert.Equal(t, r.Clique(), node.Labels[rackbox.CliqueLabel])
		require.NotNil(t, p.Spec.Affinity.PodAffinity, "placement.topologyKey makes a required pod affinity")
		assert.Equal(t, rackbox.CliqueLabel, p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey)
		assertChannelAllocated(t, &p)
	}
	assert.Len(t, trays, 3*len(tc.roles), "one TP4 worker per 4-GPU tray")

	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(graphGVK)
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.graph}, g))
	ready, _ := kcluster.ReadyCondition(g)
	assert.Equal(t, []any{"True", "all_resources_are_ready", g.GetGeneration()}, []any{ready.Status, ready.Reason, ready.ObservedGeneration}, "Ready written by the operator")
	smoke, _ := res.Outputs["smokeTest"].Value.(map[string]any)
	assert.Equal(t, true, smoke["passed"], "the smoke test ran: %v", res.Outputs["smokeTest"].Value)
	assert.Contains(t, smoke["reply"], "kwok stage", "its result is the pod's termination message, set by the box")

	out := res.Outputs
	assert.Equal(t, ns, out["namespace"].Value)
	assert.Equal(t, tc.graph, out["graphName"].Value)
	assert.Equal(t, tc.graph+"-frontend", out["frontendService"].Value)
	assert.EqualValues(t, 8000, out["frontendPort"].Value)
	assert.Equal(t, "http://"+tc.graph+"-frontend."+ns+".svc.cluster.local:8000", out["frontendUrl"].Value)
	assert.Equal(t, "kubectl -n "+ns+" port-forward service/"+tc.graph+"-frontend 8000:8000", out["portForwardCommand"].Value)
	assert.EqualValues(t, tc.gpus, out["gpuCount"].Value)
	assert.Equal(t, tc.graph+"-cd", out["computeDomain"].Value)
	cd, found := getOn(t, box.Client, computeDomainGVK, ns, tc.graph+"-cd")
	require.True(t, found, "the ComputeDomain")
	assert.Contains(t, cd.GetFinalizers(), rackbox.ComputeDomainFinalizer, "the compute-domain-controller owns the ComputeDomain")
	imex := client.ObjectKey{Namespace: rackbox.DriverNamespace, Name: "computedomain-daemon-" + string(cd.GetUID())}
	require.NoError(t, box.Client.Get(ctx, imex, &appsv1.DaemonSet{}), "the controller's IMEX DaemonSet")
	assert.Equal(t, "shared-model-cache", out["cacheClaimName"].Value)
	svc := &corev1.Service{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: out["frontendService"].Value.(string)}, svc),
		"the output names the Service the operator created")
	require.Len(t, svc.Spec.Ports, 1)
	assert.Equal(t, "http", svc.Spec.Ports[0].Name)
	assert.Equal(t, float64(svc.Spec.Ports[0].Port), out["frontendPort"].Value, "the output port is the operator's Service port")

	// The live graph is exactly the program's spec for this config: validated by the real
	// CRD schema on the way in, nothing pruned or rewritten by the API server or the operator.
	cfg, err := s.stack.Config(ctx)
	require.NoError(t, err)
	cfg.Placement.Clique = r.Clique() // the clique `up` chose: the rack's
	for _, role := range cfg.Workers() {
		role.Config.Scheduling.RuntimeClassName = rackbox.WorkerRuntimeClass // the class the box's site names
	}
	want, err := manifest.GraphSpec(&cfg, manifest.Decisions{})
	require.NoError(t, err)
	spec := liveGraphSpecOn(t, box.Client, ns, tc.graph)
	assert.JSONEq(t, toJSON(t, want), toJSON(t, spec))
	picker := 0
	if tc.pool {
		picker = 1
		assertInferencePool(t, ns, tc.graph, res.Outputs, 3*len(tc.roles))
	}
	require.Len(t, spec.Components, 1+len(tc.roles)+picker)
	for i, role := range tc.roles {
		c := spec.Components[i+1]
		assert.Equal(t, role, c.Name)
		assert.Equal(t, 3, c.Replicas)
		assert.Equal(t, tc.graph+"-cd-channel", *c.PodTemplate.Spec.ResourceClaims[0].ResourceClaimTemplateName)
		assert.Equal(t, "speculative-config", c.PodTemplate.Spec.Containers[0].Env[1].ValueFrom.ConfigMapKeyRef.Key)
	}
	cm, ok := getOn(t, box.Client, configMapGVK, ns, tc.graph+"-config")
	require.True(t, ok)
	data := cm.Object["data"].(map[string]any)
	assert.Contains(t, data["speculative-config"], `"num_speculative_tokens": 3`)
	assert.Contains(t, data["speculative-config-synthetic"], `"synthetic_acceptance_length": 2.89`)
	secret, ok := getOn(t, box.Client, secretGVK, ns, "hf-token-secret")
	require.True(t, ok)
	assert.Contains(t, secret.Object["data"], "HF_TOKEN")

	// 2. A second up and a preview with --expect-no-changes change nothing.
	_, ops, err := s.up(ctx)
	require.NoError(t, err, s.log.String())
	assert.Empty(t, ops, "a second up changes nothing")
	_, err = s.preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "preview --expect-no-changes\n%s", s.log.String())

	// 3. A vLLM flag updates only the graph; the operator rolls the workers to it.
	workers := client.MatchingLabels{graphLabelKey: tc.graph, "nvidia.com/dynamo-component": tc.roles[0]}
	before := podsOf(t, ns, workers)
	frontend := &appsv1.Deployment{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.graph + "-frontend"}, frontend))
	s.set(ctx, tc.flagKey, "64")
	_, ops, err = s.up(ctx)
	require.NoError(t, err, s.log.String())
	assert.Equal(t, map[string]string{"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph": "update"}, graphOps(t, ops))
	assert.Contains(t, liveGraphSpecOn(t, box.Client, ns, tc.graph).Components[1].PodTemplate.Spec.Containers[0].Args, "64")
	for _, p := range podsOf(t, ns, workers) {
		assert.NotEqual(t, before[0].Labels["pod-template-hash"], p.Labels["pod-template-hash"], "worker %s rolled", p.Name)
	}
	// `up` returned on the new generation's Ready, after the operator's rolling update.
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.graph}, g))
	ready, _ = kcluster.ReadyCondition(g)
	assert.Equal(t, []any{"True", g.GetGeneration()}, []any{ready.Status, ready.ObservedGeneration})
	updated, _, _ := unstructured.NestedStringSlice(g.Object, "status", "rollingUpdate", "updatedComponents")
	assert.Contains(t, updated, tc.roles[0])
	unchanged := &appsv1.Deployment{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.graph + "-frontend"}, unchanged))
	assert.Equal(t, frontend.Generation, unchanged.Generation, "the frontend was not touched")

	// 4. Synthetic acceptance changes only the workers' ConfigMap key, and says so loudly.
	s.set(ctx, "minimax-m3:speculativeDecoding.mode", "synthetic")
	_, ops, err = s.up(ctx)
	require.NoError(t, err, s.log.String())
	assert.Equal(t, map[string]string{"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph": "update"}, graphOps(t, ops))
	for _, c := range liveGraphSpecOn(t, box.Client, ns, tc.graph).Components[1 : 1+len(tc.roles)] {
		assert.Equal(t, "speculative-config-synthetic", c.PodTemplate.Spec.Containers[0].Env[1].ValueFrom.ConfigMapKeyRef.Key)
	}
	assert.Contains(t, s.log.String(), "BENCHMARK ONLY")

	// 5. A new model revision replaces the download Job (this time with an image the box
	// completes at once) and updates the graph; the claim, namespace and Secret stay.
	newRevision := "0123456789abcdef0123456789abcdef01234567"
	s.set(ctx, "minimax-m3:model.revision", newRevision)
	s.set(ctx, "minimax-m3:modelDownload.image", "python:3.10-slim")
	_, ops, err = s.up(ctx)
	require.NoError(t, err, s.log.String())
	changed := graphOps(t, ops)
	assert.Contains(t, changed["kubernetes:batch/v1:Job model-download"], "replace")
	assert.Equal(t, "update", changed["kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph"])
	for k := range changed {
		assert.NotRegexp(t, "Namespace|Secret|PersistentVolumeClaim|ConfigMap|ComputeDomain", k, "only the Job and the graph change")
	}
	assert.Contains(t, liveGraphSpecOn(t, box.Client, ns, tc.graph).Components[1].PodTemplate.Spec.Containers[0].Args, newRevision)

	// 6. No plaintext token in the state, the outputs or the logs.
	state := s.export()
	assert.NotContains(t, state, testToken)
	assert.Contains(t, state, "ciphertext", "the token is encrypted in state")
	outputs, err := s.stack.Outputs(ctx)
	require.NoError(t, err)
	for k, v := range outputs {
		assert.NotContains(t, toJSON(t, v.Value), testToken, k)
	}
	assert.NotContains(t, s.log.String(), testToken)
	assert.NotContains(t, s.log.String(), "client-key-data")

	// 7. destroy.
	_, err = s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
	require.NoError(t, err, s.log.String())
	eventually(t, 2*time.Minute, "every pod is gone (garbage collector, kwok)", func(ctx context.Context) (bool, error) {
		pods, err := listPods(ctx, ns, nil)
		return err == nil && len(pods) == 0, err
	})
	for _, kind := range []client.ObjectList{&appsv1.DeploymentList{}, &batchv1.JobList{}, &resourcev1.ResourceClaimList{}, &resourcev1.ResourceClaimTemplateList{}, &corev1.ConfigMapList{}} {
		require.NoError(t, box.Client.List(ctx, kind, client.InNamespace(ns)))
		if cms, ok := kind.(*corev1.ConfigMapList); ok {
			// Every namespace has the API server's root CA bundle.
			cms.Items = slices.DeleteFunc(cms.Items, func(c corev1.ConfigMap) bool { return c.Name == "kube-root-ca.crt" })
		}
		assert.Zero(t, meta.LenList(kind), "%T left in %s", kind, ns)
	}
	pools := schema.GroupVersionKind{Group: manifest.InferencePools.Group, Version: "v1", Kind: "InferencePool"}
	for _, gvk := range []schema.GroupVersionKind{graphGVK, computeDomainGVK, pools} {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		require.NoError(t, box.Client.List(ctx, &list, client.InNamespace(ns)))
		assert.Empty(t, list.Items, "%v left in %s", gvk, ns)
	}
	assert.True(t, apierrors.IsNotFound(box.Client.Get(ctx, imex, &appsv1.DaemonSet{})), "the controller deleted the IMEX DaemonSet before its finalizer")
	_, exists := getOn(t, box.Client, secretGVK, ns, "hf-token-secret")
	assert.False(t, exists, "the stack's token Secret is deleted")
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared-model-cache"}, pvc), "destroy keeps the cache claim")
	assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase)
	nsObj := &corev1.Namespace{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Name: ns}, nsObj), "and the namespace that holds it")
	assert.Nil(t, nsObj.DeletionTimestamp)
}

// assertInferencePool checks a stack routed to an InferencePool: the real operator made the pool
// for the graph's endpoint picker, selecting exactly the graph's worker pods, whose frontend
// sidecars listen on the pool's target port; the picker runs; the route's backend is the pool, and
// the outputs name the external URL.
func assertInferencePool(t *testing.T, ns, graph string, outputs auto.OutputMap, workers int) {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(box.Config)
	require.NoError(t, err)
	live, err := dyn.Resource(manifest.InferencePools).Namespace(ns).Get(ctx, graph+"-pool", metav1.GetOptions{})
	require.NoError(t, err, "the operator made the InferencePool for the endpoint picker")
	var pool gaiev1.InferencePool
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, &pool))
	require.Len(t, pool.Spec.TargetPorts, 1)
	assert.EqualValues(t, 8000, pool.Spec.TargetPorts[0].Number)
	assert.Equal(t, gaiev1.ObjectName(graph+"-epp"), pool.Spec.EndpointPickerRef.Name, "the pool asks the picker's Service")
	labels := map[string]string{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		labels[string(k)] = string(v)
	}
	pods := podsOf(t, ns, labels)
	assert.Len(t, pods, workers, "the pool selects the graph's workers")
	for _, p := range pods {
		assert.Contains(t, []string{"worker", "prefill", "decode"}, p.Labels["nvidia.com/dynamo-component-type"], p.Name)
		i := slices.IndexFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == manifest.FrontendSidecarName })
		require.GreaterOrEqual(t, i, 0, "pod %s has its frontend sidecar", p.Name)
		ports := p.Spec.Containers[i].Ports
		assert.True(t, slices.ContainsFunc(ports, func(cp corev1.ContainerPort) bool {
			return cp.ContainerPort == 8000 && cp.Name == components.FrontendMetricsPort
		}),
			"the sidecar of %s listens on the pool's target port, as the operator made it: %v", p.Name, ports)
	}
	assert.Len(t, podsOf(t, ns, client.MatchingLabels{graphLabelKey: graph, "nvidia.com/dynamo-component": manifest.EndpointPickerName}), 1, "the endpoint picker runs")

	route, err := dyn.Resource(manifest.HTTPRoutes).Namespace(ns).Get(ctx, graph, metav1.GetOptions{})
	require.NoError(t, err)
	var spec gatewayv1.HTTPRouteSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(route.Object["spec"].(map[string]any), &spec))
	ref := spec.Rules[0].BackendRefs[0]
	assert.Equal(t, []string{"inference.networking.k8s.io", "InferencePool", pool.Name}, []string{string(*ref.Group), string(*ref.Kind), string(ref.Name)}, "the route's backend is the pool")
	assert.Equal(t, "https://disagg.box.example", outputs["externalUrl"].Value)
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

// On a rack with exactly the GPUs the stack needs, the recipe's rollout (the operator's default,
// worker.rollout.strategy OperatorDefault): a vLLM flag change makes the operator start a new
// worker before it stops an old one (25% surge of 3 is 1), and the real scheduler leaves that pod
// Pending for lack of GPUs, with its reason, which `up` shows while it waits; the old workers keep
// serving, and `up` ends at readiness.timeout. A tray drained mid-rollout is named with it.
func TestBoxFullRackRecipeRolloutWaitsForAGPU(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-full-recipe"
	s := readyBoxStack(t, "agg", ns, rackbox.NVL72("full-recipe").WithGPUs(12), auto.ConfigMap{"minimax-m3:worker.rollout.strategy": {Value: "OperatorDefault"}})
	var err error
	workers := client.MatchingLabels{graphLabelKey: aggGraph, "nvidia.com/dynamo-component": "Worker"}
	require.Len(t, podsOf(t, ns, workers), 3)

	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "48")
	s.set(ctx, "minimax-m3:readiness.timeout", "45s")
	type upResult struct{ err error }
	done := make(chan upResult, 1)
	go func() {
		_, _, err := s.up(ctx)
		done <- upResult{err}
	}()

	// Mid-rollout, once the operator's surge pod waits for a GPU, a tray is drained (cordoned, its
	// worker deleted: kubectl drain --disable-eviction): that worker's replacement finds no room
	// either, and up names the drained tray beside the scheduler's reason.
	require.NoError(t, poll.Until(ctx, 2*time.Minute, 500*time.Millisecond, "the operator's surge pod waits for a GPU", func(ctx context.Context) (bool, error) {
		pods, err := listPods(ctx, ns, workers)
		return err == nil && slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Spec.NodeName == "" }), err
	}))
	var drained corev1.Pod
	for _, p := range podsOf(t, ns, workers) {
		if p.Status.Phase == corev1.PodRunning {
			drained = p
			break
		}
	}
	require.NotEmpty(t, drained.Name, "an old worker serves")
	node := &corev1.Node{}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Name: drained.Spec.NodeName}, node))
	cordon := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = true
	require.NoError(t, box.Client.Patch(ctx, node, cordon))
	require.NoError(t, box.Client.Delete(ctx, &drained))

	var up upResult
	select {
	case up = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("up did not end at readiness.timeout")
	}
	err = up.err
	require.Error(t, err, "the rollout cannot finish on a full rack")
	var pending []corev1.Pod
	for _, p := range podsOf(t, ns, workers) {
		if p.Spec.NodeName == "" {
			pending = append(pending, p)
		}
	}
	require.Len(t, pending, 2, "the operator's surge pod and the drained worker's replacement")
	for _, p := range pending {
		scheduled := podCondition(&p, corev1.PodScheduled)
		require.NotNil(t, scheduled)
		assert.Equal(t, corev1.PodReasonUnschedulable, scheduled.Reason)
		assert.Contains(t, scheduled.Message, "Insufficient nvidia.com/gpu", "the scheduler's own reason")
	}
	assert.Contains(t, s.log.String(), "cannot be scheduled: Unschedulable: 0/", "up shows the scheduler's reason while it waits")
	assert.Contains(t, s.log.String(), "Insufficient nvidia.com/gpu")
	// The rollout standing at part capacity: the error gives the components' counts (the
	// operator counts the surge pod among the replicas).
	assert.Regexp(t, `its components: [^;]*Worker [0-3] of [34] ready, [01] updated`, err.Error())
	assert.Contains(t, s.log.String(), "minimax-m3:worker.rollout: this update replaces Worker's pods, and its rollout starts 1 pod(s) (4 GPUs) beside its 3",
		"up warned before it started")
	running := 0
	for _, p := range podsOf(t, ns, workers) {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	assert.Equal(t, 2, running, "the old workers but the drained one keep serving: the default rollout takes none down first")
	line := "out of service among the nodes it could run on: " + node.Name + " (NodeCordoned)"
	assert.Contains(t, s.log.String(), line, "up names the drained tray while it waits")
	assert.Contains(t, err.Error(), line, "and when it gives up")
	assert.Contains(t, err.Error(), "1 node(s) were unschedulable", "beside the scheduler's own count")
}

// On the same full rack, the program's default rollout (worker.rollout: RollingUpdate, maxSurge 0,
// maxUnavailable 1) finishes the same flag change: the operator stops one old worker before it
// starts each new one, so no pod ever needs a spare GPU slot, and `up` returns once the graph is
// Ready at the new generation with every worker replaced.
func TestBoxFullRackFlagChangeRollsWithoutASpareGPU(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-full-default"
	s := readyBoxStack(t, "agg", ns, rackbox.NVL72("full-default").WithGPUs(12), nil)
	var err error
	workers := client.MatchingLabels{graphLabelKey: aggGraph, "nvidia.com/dynamo-component": "Worker"}
	before := podsOf(t, ns, workers)
	require.Len(t, before, 3)

	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(graphGVK)
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph}, g))
	generation := g.GetGeneration()

	// Through the CLI with the policies in front (cmd/policy -up): a worker roll nobody consented
	// to is refused before anything is applied; with consent, exactly the checked plan is applied.
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "48")
	out, code := policyUp(t, s)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "FAIL: Worker rolls")
	assert.Contains(t, out, "policy: agg not applied")
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph}, g))
	assert.Equal(t, generation, g.GetGeneration(), "nothing applied")
	out, code = policyUp(t, s, "-allow-roll", "Worker")
	require.Equal(t, 0, code, "the rollout fits the full rack\n%s", out)
	assert.Contains(t, out, "policy: agg passed; applying the checked plan")
	after := podsOf(t, ns, workers)
	require.Len(t, after, 3)
	for _, p := range after {
		assert.Equal(t, corev1.PodRunning, p.Status.Phase)
		assert.NotEqual(t, before[0].Labels["pod-template-hash"], p.Labels["pod-template-hash"], "every worker replaced")
		assert.Contains(t, strings.Join(p.Spec.Containers[0].Args, " "), "--max-num-seqs 48")
	}
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph}, g))
	assert.Greater(t, g.GetGeneration(), generation)
	ready, _ := kcluster.ReadyCondition(g)
	assert.Equal(t, []any{"True", g.GetGeneration()}, []any{ready.Status, ready.ObservedGeneration})

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

// A download pod that fails, and workers that do not fit the rack, each fail `up` with
// Kubernetes' own reason: the Job controller's BackoffLimitExceeded, the scheduler's Insufficient
// nvidia.com/gpu.
func TestBoxFailuresCarryKubernetesReasonsDownload(t *testing.T) {
	parallelOnBox(t)
	r := addRack(t, rackbox.NVL72("fail-dl").WithGPUs(12))
	s := newBoxStack(t, "agg", "box-fail-dl", r, auto.ConfigMap{
		"minimax-m3:modelDownload.image":        {Value: rackbox.FailingImage},
		"minimax-m3:modelDownload.backoffLimit": {Value: "0"},
	})
	_, _, err := s.up(context.Background())
	require.Error(t, err)
	assert.Contains(t, s.log.String(), "BackoffLimitExceeded", "the Job controller's reason\n%s", s.log.String())
	// up failed on the Job's condition, not at the download's timeout, and made no graph.
	assert.Contains(t, err.Error(), "[BackoffLimitExceeded]")
	assert.NotContains(t, err.Error(), "timed out")
	_, exists := getOn(t, box.Client, graphGVK, "box-fail-dl", aggGraph)
	assert.False(t, exists, "no graph is created without the model")
}

func TestBoxFailuresCarryKubernetesReasonsTooFewGPUs(t *testing.T) {
	parallelOnBox(t)
	r := addRack(t, rackbox.NVL72("fail-gpu").WithGPUs(8))
	// Long enough for the download, the operator and the scheduler's verdict on a box busy
	// with the parallel tests; the wait runs it out on purpose. The placement check, which
	// would refuse this graph before anything is created (box_placement_test.go), is off:
	// this is what `up` shows when the room is gone after the check (another team took it).
	s := newBoxStack(t, "agg", "box-fail-gpu", r, auto.ConfigMap{
		"minimax-m3:readiness.timeout": {Value: "60s"},
		"minimax-m3:placement.check":   {Value: "false"},
	})
	_, _, err := s.up(context.Background())
	require.Error(t, err)
	assert.Contains(t, s.log.String(), "cannot be scheduled: Unschedulable: 0/", "the scheduler's verdict, in up's output\n%s", s.log.String())
	assert.Contains(t, s.log.String(), "Insufficient nvidia.com/gpu")
	assert.Contains(t, err.Error(), "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment (graph):", "the error names the graph resource")
	assert.Contains(t, err.Error(), "was not Ready at generation 1 within 1m0s (readiness.timeout, 60s)")
	assert.Contains(t, err.Error(), "Insufficient nvidia.com/gpu", "and what kept its pods from running")
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
