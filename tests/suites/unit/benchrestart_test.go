package unit

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
