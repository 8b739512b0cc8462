package unit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"minimax-m3/benchmark"
)

// A sweep's restart between points names what keeps a replacement pod from running as it sees it,
// and ends at once on a terminal problem instead of waiting out readiness.timeout. (A fake
// clientset stands for the API server; its delete-collection reaction plays the graph's
// ReplicaSets, which start replacements whose main container crash-loops, the status a kubelet
// writes after three failed starts. The rack box runs the restart for real in
// box_agg_daytwo_test.go.)
func TestBenchmarkRestartEndsOnACrashLoop(t *testing.T) {
	ctx := context.Background()
	c := disaggConfig(t, map[string]string{"benchmark": `{"enabled": true}`})
	pod := func(name string, status corev1.ContainerStatus) *corev1.Pod {
		status.Name = "main"
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: name, UID: types.UID("uid-" + name),
				Labels: map[string]string{"nvidia.com/dynamo-graph-deployment-name": c.GraphName, "nvidia.com/dynamo-component": "PrefillWorker"}},
			Spec:   corev1.PodSpec{NodeName: "tray-01"},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{status}},
		}
	}
	kube := fake.NewClientset(pod("g-worker-old", corev1.ContainerStatus{Ready: true}))
	kube.PrependReactor("delete-collection", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		tracker := kube.Tracker()
		gvr := corev1.SchemeGroupVersion.WithResource("pods")
		if err := tracker.Delete(gvr, "inference", "g-worker-old"); err != nil {
			return true, nil, err
		}
		crashing := corev1.ContainerStatus{RestartCount: 3,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}}
		return true, nil, tracker.Create(gvr, pod("g-worker-new", crashing), "inference")
	})
	var beats []string
	err := (&benchmark.Sweep{Config: &c, Namespace: "inference", Kube: kube}).RestartPods(ctx, func(m string) { beats = append(beats, m) })
	require.Error(t, err)
	assert.Equal(t, "the graph's pods did not come back: pod g-worker-new (component PrefillWorker) on node tray-01, container main: "+
		"CrashLoopBackOff (3 restarts, last exit Error, code 1): back-off 40s (this does not clear without a change)", err.Error())
	assert.Equal(t, []string{"deleted the graph's 1 pods; waiting for their replacements to be Ready"}, beats)
}

// With a dynamic client the restart follows the replacements as `up` does, nodes included: a
// replacement on a tray that stopped reporting is named with the node's state between points,
// and its crash loop, once terminal, ends the wait. (Fake clientsets stand for the API server:
// the typed one for the listing and the deletion, the dynamic one for the watches; the deletion's
// reaction puts the replacement in both.)
func TestBenchmarkRestartNamesTheNodeUnderAReplacement(t *testing.T) {
	ctx := context.Background()
	c := disaggConfig(t, map[string]string{"benchmark": `{"enabled": true}`})
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	pod := func(name string, restarts int32) *corev1.Pod {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: name, UID: types.UID("uid-" + name),
				Labels: map[string]string{"nvidia.com/dynamo-graph-deployment-name": c.GraphName, "nvidia.com/dynamo-component": "DecodeWorker"}},
			Spec: corev1.PodSpec{NodeName: "tray-02"}}
		s := corev1.ContainerStatus{Name: "main", Ready: restarts < 0}
		if restarts >= 0 {
			s.RestartCount = restarts
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}
			s.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{s}
		return p
	}
	tray := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "tray-02"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}}}
	old := pod("g-decode-old", -1)
	kube := fake.NewClientset(old)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), watchedKinds,
		toUnstructured(t, old), toUnstructured(t, tray))
	kube.PrependReactor("delete-collection", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gvr := corev1.SchemeGroupVersion.WithResource("pods")
		if err := kube.Tracker().Delete(gvr, "inference", "g-decode-old"); err != nil {
			return true, nil, err
		}
		if err := dyn.Resource(pods).Namespace("inference").Delete(ctx, "g-decode-old", metav1.DeleteOptions{}); err != nil {
			return true, nil, err
		}
		if _, err := dyn.Resource(pods).Namespace("inference").Create(ctx, toUnstructured(t, pod("g-decode-new", 1)), metav1.CreateOptions{}); err != nil {
			return true, nil, err
		}
		return true, nil, kube.Tracker().Create(gvr, pod("g-decode-new", 1), "inference")
	})
	beats := make(chan string, 32)
	done := make(chan error, 1)
	go func() {
		done <- (&benchmark.Sweep{Config: &c, Namespace: "inference", Kube: kube, Dynamic: dyn}).RestartPods(ctx, func(m string) { beats <- m })
	}()
	want := "pod g-decode-new (component DecodeWorker) on node tray-02: NodeNotReady: Ready is Unknown: NodeStatusUnknown Kubelet stopped posting node status."
	deadline := time.After(20 * time.Second)
	for seen := false; !seen; {
		select {
		case m := <-beats:
			seen = m == want
		case err := <-done:
			t.Fatalf("the restart ended before naming the node: %v", err)
		case <-deadline:
			t.Fatal("the node under the replacement was not named")
		}
	}
	// The crash loop becomes terminal: the wait ends at once.
	_, err := dyn.Resource(pods).Namespace("inference").Update(ctx, toUnstructured(t, pod("g-decode-new", 3)), metav1.UpdateOptions{})
	require.NoError(t, err)
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "the graph's pods did not come back: pod g-decode-new (component DecodeWorker) on node tray-02, container main: CrashLoopBackOff (3 restarts")
	case <-time.After(20 * time.Second):
		t.Fatal("a terminal crash loop did not end the restart's wait")
	}
}
