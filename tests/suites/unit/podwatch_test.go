package unit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"minimax-m3/internal/cluster"
)

// What `up` hears while the graph's pods and the node under them change: each problem once while
// it lasts (a crash loop's growing restart count is not a new one), the node's problem for the pod
// on it, and again when it comes back after it cleared. (A fake dynamic client stands for the API
// server's watches; the rack box drives the real ones in box_troubles_test.go.)
func TestWatchPodProblemsReportsEachOnceWhileItLasts(t *testing.T) {
	t.Parallel()
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	node := func(ready corev1.ConditionStatus) *unstructured.Unstructured {
		n := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "tray-01"}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}
		return toUnstructured(t, n)
	}
	pod := func(restarts int32) *unstructured.Unstructured {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: "g-worker-a", Labels: map[string]string{cluster.GraphLabel: "g", cluster.ComponentLabel: "Worker"}},
			Spec:       corev1.PodSpec{NodeName: "tray-01"},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: restarts,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}}}},
		}
		return toUnstructured(t, p)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), watchedKinds, node(corev1.ConditionTrue), pod(3))
	r := cluster.NewFromClients(nil, dyn)

	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan cluster.PodProblem, 16)
	done := make(chan error, 1)
	go func() {
		done <- r.WatchPodProblems(ctx, "inference", "g", 0, func(p cluster.PodProblem) { reports <- p })
	}()
	next := func(what string) cluster.PodProblem { return nextReport(t, reports, what) }
	none := func(what string) { noReport(t, reports, what, 500*time.Millisecond) }
	update := func(gvr schema.GroupVersionResource, ns string, obj *unstructured.Unstructured) {
		if ns == "" {
			_, err := dyn.Resource(gvr).Update(ctx, obj, metav1.UpdateOptions{})
			require.NoError(t, err)
			return
		}
		_, err := dyn.Resource(gvr).Namespace(ns).Update(ctx, obj, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	crash := next("the crash loop")
	assert.Equal(t, "CrashLoopBackOff", crash.Reason)
	assert.True(t, crash.Terminal)
	assert.True(t, crash.Existing, "the pod was there when the watch started")
	update(pods, "inference", pod(4))
	none("the same crash loop, one restart more")

	update(nodes, "", node(corev1.ConditionUnknown))
	down := next("the node NotReady")
	assert.Equal(t, cluster.PodProblem{Pod: "g-worker-a", Component: "Worker", Node: "tray-01", Reason: "NodeNotReady",
		Message: "Ready is Unknown: NodeStatusUnknown Kubelet stopped posting node status.", Existing: true}, down)
	update(pods, "inference", pod(5))
	none("the pod changes on the same NotReady node")
	update(nodes, "", node(corev1.ConditionTrue))
	none("the node back")
	update(nodes, "", node(corev1.ConditionUnknown))
	assert.Equal(t, down, next("the node NotReady again"))

	// A pod made after the watch started (a rollout's replacement) is not an existing one.
	later := pod(3)
	later.SetName("g-worker-b")
	_, err := dyn.Resource(pods).Namespace("inference").Create(ctx, later, metav1.CreateOptions{})
	require.NoError(t, err)
	for range 2 { // its crash loop, and the NotReady node under it, in either order
		p := next("the new pod's problems")
		assert.Equal(t, "g-worker-b", p.Pod)
		assert.False(t, p.Existing, "%s", p)
	}

	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(20 * time.Second):
		t.Fatal("the watch did not end with its context")
	}
}

// A replacement the scheduler cannot place names the nodes it could run on that are out of
// service: a tray of its rack cordoned for maintenance (not one of another rack, nor one of its
// rack kept for another team by a taint it does not tolerate), and again when that changes (the
// tray back, another NotReady).
func TestAnUnschedulablePodNamesTheTraysOutOfService(t *testing.T) {
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	node := func(name, rack string, cordoned bool, ready corev1.ConditionStatus, taints ...corev1.Taint) *unstructured.Unstructured {
		n := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rack": rack}},
			Spec: corev1.NodeSpec{Unschedulable: cordoned, Taints: taints}}
		if cordoned {
			// The node lifecycle controller's taint of a cordoned node.
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady"}}
		return toUnstructured(t, n)
	}
	pending := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: "g-worker-new", Labels: map[string]string{cluster.GraphLabel: "g", cluster.ComponentLabel: "Worker"}},
		Spec:       corev1.PodSpec{NodeSelector: map[string]string{"rack": "a"}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu."}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), watchedKinds,
		node("tray-a1", "a", true, corev1.ConditionTrue), node("tray-a2", "a", false, corev1.ConditionTrue), node("tray-b1", "b", true, corev1.ConditionTrue),
		// Another team's tray of the same rack, kept for them by a taint this pod does not tolerate.
		node("tray-a3", "a", true, corev1.ConditionTrue, corev1.Taint{Key: "example.com/team-b", Value: "only", Effect: corev1.TaintEffectNoSchedule}),
		toUnstructured(t, pending))
	r := cluster.NewFromClients(nil, dyn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan cluster.PodProblem, 32)
	go func() { _ = r.WatchPodProblems(ctx, "inference", "g", 0, func(p cluster.PodProblem) { reports <- p }) }()
	// until is the first report whose nodes are want (the pod and node watches start in either order).
	until := func(want string) cluster.PodProblem {
		deadline := time.After(20 * time.Second)
		for {
			select {
			case p := <-reports:
				if p.Reason == corev1.PodReasonUnschedulable && p.OutOfService == want {
					return p
				}
			case <-deadline:
				t.Fatalf("no report naming %q out of service", want)
			}
		}
	}
	// The first line already names the tray: the pods are followed once the nodes are known.
	var p cluster.PodProblem
	select {
	case p = <-reports:
	case <-time.After(20 * time.Second):
		t.Fatal("no report of the unschedulable pod")
	}
	assert.Equal(t, "tray-a1 (NodeCordoned)", p.OutOfService)
	assert.Equal(t, "pod g-worker-new (component Worker) cannot be scheduled: Unschedulable: 0/3 nodes are available: 1 node(s) were unschedulable, "+
		"2 Insufficient nvidia.com/gpu.; out of service among the nodes it could run on: tray-a1 (NodeCordoned)", p.String())
	_, err := dyn.Resource(nodes).Update(ctx, node("tray-a1", "a", false, corev1.ConditionTrue), metav1.UpdateOptions{})
	require.NoError(t, err)
	until("")
	_, err = dyn.Resource(nodes).Update(ctx, node("tray-a2", "a", false, corev1.ConditionFalse), metav1.UpdateOptions{})
	require.NoError(t, err)
	until("tray-a2 (NodeNotReady)")
}

// A worker placed on a tray whose IMEX daemon is not Ready has no container status yet: what holds
// it is in the kubelet's events, which say only that the DRA plugin did not answer in time (it
// retries until then), and `up` names the wait stage by stage: the tray's IMEX daemon pod, the
// ComputeDomain's status of the tray, the claim. The
// event is there before the watch starts (an up run again on a stuck worker); it is named once,
// and again only when it says something new; another graph's pod is not this one's account, and
// once the pod runs, a late event is history.
func TestAWorkerHeldForItsIMEXDaemonSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	events := schema.GroupVersionResource{Version: "v1", Resource: "events"}
	domains := schema.GroupVersionResource{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomains"}
	worker := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: "g-worker-a", UID: "uid-a", Labels: map[string]string{cluster.GraphLabel: "g", cluster.ComponentLabel: "Worker"}},
		Spec:       corev1.PodSpec{NodeName: "tray-01"},
		Status:     corev1.PodStatus{Phase: corev1.PodPending}}
	// Another stack's pod in the namespace, held the same way: not this graph's account.
	other := worker.DeepCopy()
	other.Name, other.UID, other.Labels[cluster.GraphLabel] = "h-worker-a", "uid-h", "h"
	domain := func(status string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
			"metadata": map[string]any{"namespace": "inference", "name": "g-compute-domain", "uid": "cd-uid"},
			"status":   map[string]any{"nodes": []any{map[string]any{"name": "tray-01", "status": status}}}}}
	}
	// The domain's IMEX daemon on the tray (in the driver's namespace): running, not Ready.
	daemon := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "nvidia-dra-driver-gpu", Name: "computedomain-daemon-x", Labels: map[string]string{cluster.ComputeDomainLabel: "cd-uid"}},
		Spec:       corev1.PodSpec{NodeName: "tray-01"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "compute-domain-daemon", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	// Another domain's daemon on the tray, and this domain's on another tray: not the chain's.
	elsewhere, otherDomain := daemon.DeepCopy(), daemon.DeepCopy()
	elsewhere.Name, elsewhere.Spec.NodeName, elsewhere.Status.Conditions[0].Status = "computedomain-daemon-y", "tray-02", corev1.ConditionTrue
	otherDomain.Name, otherDomain.Labels[cluster.ComputeDomainLabel], otherDomain.Status.Conditions[0].Status = "computedomain-daemon-z", "other-uid", corev1.ConditionTrue
	const deadline = "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources: rpc error: code = DeadlineExceeded desc = context deadline exceeded"
	event := func(pod *corev1.Pod, name string, at time.Time) *unstructured.Unstructured {
		return toUnstructured(t, &corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
			ObjectMeta:     metav1.ObjectMeta{Namespace: "inference", Name: pod.Name + "." + name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "inference", Name: pod.Name, UID: pod.UID},
			Type:           corev1.EventTypeWarning, Reason: "FailedPrepareDynamicResources", Source: corev1.EventSource{Component: "kubelet", Host: "tray-01"},
			LastTimestamp: metav1.NewTime(at), Message: deadline})
	}
	t0 := time.Now()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), watchedKinds,
		toUnstructured(t, worker), toUnstructured(t, other), domain("NotReady"), event(worker, "1", t0), event(other, "1", t0),
		toUnstructured(t, daemon), toUnstructured(t, elsewhere), toUnstructured(t, otherDomain))
	r := cluster.NewFromClients(nil, dyn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan cluster.PodProblem, 16)
	go func() { _ = r.WatchPodProblems(ctx, "inference", "g", 0, func(p cluster.PodProblem) { reports <- p }) }()
	next := func(what string) cluster.PodProblem { return nextReport(t, reports, what) }
	none := func(what string) { noReport(t, reports, what, time.Second) }
	p := next("the held worker")
	assert.False(t, p.Terminal, "the daemon may yet get Ready")
	assert.Equal(t, "pod g-worker-a (component Worker) on node tray-01: FailedPrepareDynamicResources: "+deadline+
		" (IMEX chain of ComputeDomain g-compute-domain on node tray-01: IMEX daemon pod nvidia-dra-driver-gpu/computedomain-daemon-x runs but is not Ready "+
		"(IMEX has not joined its peers: the daemon's log) → the node is NotReady in the domain's status.nodes (Ready once its daemon is) → "+
		"so the worker's channel claim is not prepared)", p.String())
	create := func(obj *unstructured.Unstructured) {
		_, err := dyn.Resource(events).Namespace("inference").Create(ctx, obj, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// The kubelet's next retry fails the same way: not news.
	create(event(worker, "2", t0.Add(time.Minute)))
	none("the same event again")
	// The daemon's pod is gone: the next event says so.
	require.NoError(t, dyn.Resource(pods).Namespace(daemon.Namespace).Delete(ctx, daemon.Name, metav1.DeleteOptions{}))
	_, err := dyn.Resource(domains).Namespace("inference").Update(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "resource.nvidia.com/v1beta1",
		"kind": "ComputeDomain", "metadata": map[string]any{"namespace": "inference", "name": "g-compute-domain", "uid": "cd-uid"}, "status": map[string]any{}}}, metav1.UpdateOptions{})
	require.NoError(t, err)
	create(event(worker, "3", t0.Add(2*time.Minute)))
	p = next("the daemon gone")
	assert.Contains(t, p.String(), "(IMEX chain of ComputeDomain g-compute-domain on node tray-01: no IMEX daemon pod on the node "+
		"(the domain's DaemonSet places one on a tray labelled resource.nvidia.com/computeDomain once the kubelet plugin labels it: "+
		"the label, the DaemonSet's pods and the driver's kubelet plugin) → the node is not in the domain's status.nodes (a daemon enters it once it runs) → "+
		"so the worker's channel claim is not prepared)")
	// Running now: a late event is not reported.
	worker.Status.Phase = corev1.PodRunning
	_, err = dyn.Resource(pods).Namespace("inference").Update(ctx, toUnstructured(t, worker), metav1.UpdateOptions{})
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	create(event(worker, "4", t0.Add(3*time.Minute)))
	none("a running pod's late event")
}

// nextReport is the watch's next report (on the test goroutine); the test fails without one.
func nextReport(t *testing.T, reports <-chan cluster.PodProblem, what string) cluster.PodProblem {
	t.Helper()
	select {
	case p := <-reports:
		return p
	case <-time.After(20 * time.Second):
		t.Fatalf("no report: %s", what)
		return cluster.PodProblem{}
	}
}

// noReport fails the test if the watch reports anything within wait.
func noReport(t *testing.T, reports <-chan cluster.PodProblem, what string, wait time.Duration) {
	t.Helper()
	select {
	case p := <-reports:
		t.Errorf("%s: reported %s", what, p)
	case <-time.After(wait):
	}
}

// watchedKinds are the list kinds of what WatchPodProblems watches, for the fake dynamic client.
var watchedKinds = map[schema.GroupVersionResource]string{
	{Version: "v1", Resource: "pods"}:                                              "PodList",
	{Version: "v1", Resource: "nodes"}:                                             "NodeList",
	{Version: "v1", Resource: "events"}:                                            "EventList",
	{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomains"}: "ComputeDomainList",
	// The controllers that make a graph's pods, listed at the watch's start.
	{Group: "apps", Version: "v1", Resource: "replicasets"}:                          "ReplicaSetList",
	{Group: "apps", Version: "v1", Resource: "statefulsets"}:                         "StatefulSetList",
	{Group: "grove.io", Version: "v1alpha1", Resource: "podcliques"}:                 "PodCliqueList",
	{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}: "LeaderWorkerSetList",
}

func toUnstructured(t *testing.T, obj any) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	require.NoError(t, err)
	return &unstructured.Unstructured{Object: m}
}

// A controller of the graph whose pods the API server refuses is named from its FailedCreate
// event: as an earlier rollout's (Existing) when the controller was there when the watch began,
// as this one's (terminal at once) when it was made since; another graph's controller in the
// namespace, told by its label, is not this graph's account.
func TestWatchPodProblemsNamesAControllerThatMakesNoPod(t *testing.T) {
	t.Parallel()
	replicaSets := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	events := schema.GroupVersionResource{Version: "v1", Resource: "events"}
	rs := func(name, uid, graph string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
			"metadata": map[string]any{"namespace": "inference", "name": name, "uid": uid, "labels": map[string]any{cluster.GraphLabel: graph}}}}
		return u
	}
	refused := func(name, uid string) *unstructured.Unstructured {
		return toUnstructured(t, &corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
			ObjectMeta:     metav1.ObjectMeta{Namespace: "inference", Name: name + ".1"},
			InvolvedObject: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "inference", Name: name, UID: types.UID(uid)},
			Type:           corev1.EventTypeWarning, Reason: "FailedCreate", LastTimestamp: metav1.Now(),
			Message: `Error creating: pods "` + name + `-x" is forbidden: violates PodSecurity "baseline:latest": privileged (container "main" must not set securityContext.privileged=true)`})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), watchedKinds,
		rs("g-frontend-old", "rs-old", "g"), refused("g-frontend-old", "rs-old"))
	r := cluster.NewFromClients(nil, dyn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan cluster.PodProblem, 16)
	go func() { _ = r.WatchPodProblems(ctx, "inference", "g", 0, func(p cluster.PodProblem) { reports <- p }) }()
	p := nextReport(t, reports, "the earlier rollout's refusal")
	assert.True(t, p.Existing, "its controller was there when the watch began")
	assert.True(t, p.Terminal)
	assert.Contains(t, p.String(), `FailedCreate: ReplicaSet g-frontend-old makes no pod: Error creating: pods "…" is forbidden: violates PodSecurity`)

	// Another graph's controller, named like this graph's (g-canary-…), refused: not told.
	create := func(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
		_, err := dyn.Resource(gvr).Namespace("inference").Create(ctx, obj, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	create(replicaSets, rs("g-canary-frontend-1", "rs-canary", "g-canary"))
	create(events, refused("g-canary-frontend-1", "rs-canary"))
	none := func(what string) { noReport(t, reports, what, time.Second) }
	none("another graph's controller")

	// This rollout's controller, made since the watch began: terminal, not an earlier one's.
	create(replicaSets, rs("g-frontend-new", "rs-new", "g"))
	create(events, refused("g-frontend-new", "rs-new"))
	p = nextReport(t, reports, "this rollout's refusal")
	assert.False(t, p.Existing)
	assert.True(t, p.Terminal)
	assert.Contains(t, p.String(), "ReplicaSet g-frontend-new makes no pod")
}
