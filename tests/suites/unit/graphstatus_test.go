package unit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"minimax-m3/components"
	"minimax-m3/internal/cluster"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What counts as the operator failing a graph: status.state failed with Ready=False written for
// the graph's current generation (the shape TestBoxOperatorFailureReasonInUpsError gets from the
// real operator). A pending graph, or a failure of an older generation, is not one.
func TestGraphFailureOf(t *testing.T) {
	graph := func(generation int64, state, status string, observed int64) *unstructured.Unstructured {
		g := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
			"state": state,
			"conditions": []any{map[string]any{"type": "Ready", "status": status, "observedGeneration": observed,
				"reason": "failed_to_reconcile_the_resources", "message": `cluster role "dynamo-planner" does not exist`}},
		}}}
		g.SetGeneration(generation)
		return g
	}
	f, ok := cluster.GraphFailureOf(graph(2, "failed", "False", 2))
	require.True(t, ok)
	assert.Equal(t, cluster.GraphFailure{Generation: 2, Reason: "failed_to_reconcile_the_resources", Message: `cluster role "dynamo-planner" does not exist`}, f)
	for name, g := range map[string]*unstructured.Unstructured{
		"pending":          graph(2, "pending", "False", 2),
		"older generation": graph(3, "failed", "False", 2),
		"ready":            graph(2, "successful", "True", 2),
	} {
		_, ok := cluster.GraphFailureOf(g)
		assert.False(t, ok, name)
	}
}

// What counts as a graph pod the scheduler cannot place: pending, unbound, PodScheduled=False with
// reason Unschedulable (the shape the real scheduler writes in the rack box's full-rack tests). A
// bound pod, a pod not yet tried, or one being deleted is not one.
func TestUnschedulablePods(t *testing.T) {
	const msg = "0/5 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 3 Insufficient nvidia.com/gpu."
	pod := func(node string, cond *corev1.PodCondition) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "g-worker-abc", Labels: map[string]string{"nvidia.com/dynamo-component": "Worker"}}}
		p.Spec.NodeName = node
		if cond != nil {
			p.Status.Conditions = []corev1.PodCondition{*cond}
		}
		return p
	}
	unschedulable := &corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}
	ps := cluster.ProblemsOf(pod("", unschedulable))
	require.Len(t, ps, 1)
	assert.Equal(t, cluster.PodProblem{Pod: "g-worker-abc", Component: "Worker", Reason: "Unschedulable", Message: msg}, ps[0])
	assert.Equal(t, "pod g-worker-abc (component Worker) cannot be scheduled: Unschedulable: "+msg, ps[0].String())

	deleting := pod("", unschedulable)
	deleting.DeletionTimestamp = &metav1.Time{}
	for name, p := range map[string]*corev1.Pod{
		"bound":     pod("tray-01", unschedulable),
		"not tried": pod("", nil),
		"scheduled": pod("", &corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}),
		"deleting":  deleting,
	} {
		assert.Empty(t, cluster.ProblemsOf(p), name)
	}
}

// What a bound pod's container statuses say, in the shapes a kubelet writes them: the reason, the
// restarts and the last exit, and whether it is terminal (cluster.PodProblem's Terminal). A Ready
// container has none, and a readiness probe not yet passed is how every start looks.
func TestContainerProblems(t *testing.T) {
	started := true
	pod := func(st corev1.ContainerStatus) *corev1.Pod {
		st.Name = "main"
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "g-worker-abc", Labels: map[string]string{"nvidia.com/dynamo-component": "Worker"}},
			Spec:       corev1.PodSpec{NodeName: "tray-03"},
			Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{st}},
		}
	}
	waiting := func(reason, msg string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	}
	ended := func(reason string, code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	const pull = `Back-off pulling image "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9"`
	cases := []struct {
		name     string
		status   corev1.ContainerStatus
		reason   string
		terminal bool
		text     string
	}{
		{"pull back-off", corev1.ContainerStatus{State: waiting("ImagePullBackOff", pull)}, "ImagePullBackOff", false,
			"pod g-worker-abc (component Worker) on node tray-03, container main: ImagePullBackOff: " + pull},
		// The registry's answer decides: a tag or repository that does not exist, or credentials
		// refused, does not clear without a change; a registry that times out may.
		{"a tag the registry does not have", corev1.ContainerStatus{State: waiting("ErrImagePull", `failed to pull and unpack image "nvcr.io/nvidia/x:9": failed to resolve reference "nvcr.io/nvidia/x:9": nvcr.io/nvidia/x:9: not found`)}, "ErrImagePull", true, "ErrImagePull: failed to pull"},
		{"a manifest unknown", corev1.ContainerStatus{State: waiting("ErrImagePull", "reading manifest 9 in nvcr.io/nvidia/x: manifest unknown")}, "ErrImagePull", true, "manifest unknown"},
		{"credentials refused", corev1.ContainerStatus{State: waiting("ErrImagePull", `failed to resolve reference "nvcr.io/nvidia/x:1": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed`)}, "ErrImagePull", true, "pull access denied"},
		{"a registry timing out", corev1.ContainerStatus{State: waiting("ErrImagePull", `failed to pull and unpack image "nvcr.io/nvidia/x:1": failed to resolve reference "nvcr.io/nvidia/x:1": failed to do request: Head "https://nvcr.io/v2/nvidia/x/manifests/1": dial tcp 10.0.0.9:443: i/o timeout`)}, "ErrImagePull", false, "i/o timeout"},
		{"invalid image", corev1.ContainerStatus{State: waiting("InvalidImageName", "couldn't parse image name")}, "InvalidImageName", true, "InvalidImageName"},
		{"missing Secret key", corev1.ContainerStatus{State: waiting("CreateContainerConfigError", `secret "hf-token-secret" not found`)}, "CreateContainerConfigError", false, `secret "hf-token-secret" not found`},
		{"first crashes", corev1.ContainerStatus{RestartCount: 2, State: waiting("CrashLoopBackOff", "back-off 20s"), LastTerminationState: ended("Error", 1)}, "CrashLoopBackOff", false,
			"CrashLoopBackOff (2 restarts, last exit Error, code 1): back-off 20s"},
		{"crash loop", corev1.ContainerStatus{RestartCount: 3, State: waiting("CrashLoopBackOff", "back-off 40s"), LastTerminationState: ended("Error", 1)}, "CrashLoopBackOff", true,
			"CrashLoopBackOff (3 restarts, last exit Error, code 1)"},
		{"OOM killed, backing off", corev1.ContainerStatus{RestartCount: 1, State: waiting("CrashLoopBackOff", "back-off 10s"), LastTerminationState: ended("OOMKilled", 137)}, "OOMKilled", true,
			"OOMKilled (1 restarts, last exit OOMKilled, code 137): back-off 10s"},
		{"OOM killed, running again", corev1.ContainerStatus{RestartCount: 1, State: running, LastTerminationState: ended("OOMKilled", 137)}, "OOMKilled", true, "OOMKilled"},
		{"OOM killed now", corev1.ContainerStatus{State: ended("OOMKilled", 137)}, "OOMKilled", true, "OOMKilled"},
	}
	for _, tc := range cases {
		ps := cluster.ProblemsOf(pod(tc.status))
		if !assert.Len(t, ps, 1, tc.name) {
			continue
		}
		assert.Equal(t, tc.reason, ps[0].Reason, tc.name)
		assert.Equal(t, tc.terminal, ps[0].Terminal, tc.name)
		assert.Contains(t, ps[0].String(), tc.text, tc.name)
	}
	notStarted := false
	for name, st := range map[string]corev1.ContainerStatus{
		"running and ready":              {State: running, Started: &started, Ready: true},
		"still starting (startup probe)": {State: running, Started: &notStarted},
		"started, readiness not passed":  {State: running, Started: &started},
		"creating":                       {State: waiting("ContainerCreating", "")},
		"Ready after an OOM kill long ago": {State: running, Started: &started, Ready: true, RestartCount: 4,
			LastTerminationState: ended("OOMKilled", 137)},
	} {
		assert.Empty(t, cluster.ProblemsOf(pod(st)), name)
	}
}

// A node NotReady (its kubelet stopped reporting) or cordoned is named for the pods on it; a Ready,
// schedulable node is not.
func TestNodeProblems(t *testing.T) {
	node := func(ready corev1.ConditionStatus, cordoned bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "tray-03"}}
		n.Spec.Unschedulable = cordoned
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}
		return n
	}
	reason, msg, ok := cluster.NodeProblemOf(node(corev1.ConditionUnknown, false))
	require.True(t, ok)
	assert.Equal(t, "NodeNotReady", reason)
	assert.Equal(t, "Ready is Unknown: NodeStatusUnknown Kubelet stopped posting node status.", msg)
	reason, _, ok = cluster.NodeProblemOf(node(corev1.ConditionTrue, true))
	require.True(t, ok)
	assert.Equal(t, "NodeCordoned", reason)
	_, _, ok = cluster.NodeProblemOf(node(corev1.ConditionTrue, false))
	assert.False(t, ok)
}

// How `up` words a problem: terminal ones say waiting will not help.
func TestPodProblemMessage(t *testing.T) {
	crash := cluster.PodProblem{Pod: "g-worker-abc", Component: "Worker", Node: "tray-03", Container: "main", Reason: "CrashLoopBackOff", Restarts: 3, LastReason: "Error", LastExitCode: 1, Terminal: true}
	assert.Equal(t, "DynamoGraphDeployment ns/g: pod g-worker-abc (component Worker) on node tray-03, container main: CrashLoopBackOff (3 restarts, last exit Error, code 1) "+
		"(this does not clear without a change: docs/day-two.md#troubleshooting)",
		components.PodProblemMessage("ns", "g", crash, "2h"))
	pull := cluster.PodProblem{Pod: "g-frontend-x", Component: "Frontend", Node: "tray-01", Container: "main", Reason: "ImagePullBackOff", Message: "Back-off pulling image"}
	assert.Contains(t, components.PodProblemMessage("ns", "g", pull, "2h"), "in case it clears")
}

// watchingCluster is a cluster the program can follow the graph on (components.GraphStatusWatcher):
// the graph exists at generation before (0: not yet), problems are reported for its pods, and
// WaitGraphReady answers ready, or (ready false) reports the operator's last Ready condition and
// ends as a real wait does when its budget is spent, at once, recording the budget.
type watchingCluster struct {
	fakeCluster
	before   int64
	problems []cluster.PodProblem
	ready    bool
	budget   chan time.Duration
	waits    int
	// reported closes once every problem was reported, for the wait to end only after.
	reported chan struct{}
	once     sync.Once
	mu       sync.Mutex
}

func (w *watchingCluster) GraphGeneration(context.Context, string, string) (int64, error) {
	return w.before, nil
}

func (w *watchingCluster) WatchGraphFailures(ctx context.Context, _, _ string, _ int64, _ func(cluster.GraphFailure)) error {
	<-ctx.Done()
	return ctx.Err()
}

func (w *watchingCluster) WatchPodProblems(ctx context.Context, _, _ string, _ time.Duration, report func(cluster.PodProblem)) error {
	for _, p := range w.problems {
		report(p)
	}
	w.once.Do(func() { close(w.reportedChan()) })
	<-ctx.Done()
	return ctx.Err()
}

func (w *watchingCluster) WaitGraphReady(ctx context.Context, _, _ string, _ int64, _ string, seen *cluster.GraphSeen) error {
	w.mu.Lock()
	w.waits++
	w.mu.Unlock()
	if w.ready {
		return nil
	}
	if len(w.problems) > 0 && w.problems[len(w.problems)-1].Terminal && !w.problems[len(w.problems)-1].Existing {
		<-ctx.Done() // the terminal problem ends the wait
		return ctx.Err()
	}
	<-w.reportedChan() // what a real wait sees before its end
	deadline, _ := ctx.Deadline()
	w.budget <- time.Until(deadline).Round(time.Hour)
	seen.Saw(&unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "some_resources_are_not_ready", "message": "Worker: 1/3 ready"}},
		"components": map[string]any{
			"Frontend": map[string]any{"replicas": int64(1), "updatedReplicas": int64(1), "readyReplicas": int64(1)},
			"Worker":   map[string]any{"replicas": int64(3), "updatedReplicas": int64(1), "readyReplicas": int64(1)},
		},
	}}})
	return context.DeadlineExceeded
}

func (w *watchingCluster) reportedChan() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reported == nil {
		w.reported = make(chan struct{})
	}
	return w.reported
}

// With a cluster it can read, the program waits for the graph's Ready itself, not the provider
// (pulumi.com/skipAwait): the smoke test and the outputs wait for it.
func TestTheProgramWaitsForTheGraphWhenItCanReadTheCluster(t *testing.T) {
	r, err := runWith(t, components.Options{Cluster: &watchingCluster{fakeCluster: fakeCluster{}, ready: true}}, "agg", smokeOn(nil))
	require.NoError(t, err)
	dgd := r.customResource(t, "DynamoGraphDeployment")
	annotations := decode[map[string]string](t, dgd, "metadata", "annotations")
	assert.Equal(t, "true", annotations["pulumi.com/skipAwait"])
	assert.NotContains(t, annotations, "pulumi.com/waitFor")
	var job recorded
	for _, j := range r.byType("kubernetes:batch/v1:Job") {
		if j.Name == "smoke-test" {
			job = j
		}
	}
	require.NotNil(t, job.RPC, "the smoke test's Job")
	assert.Contains(t, strings.Join(job.RPC.GetDependencies(), " "), "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment::graph", "the smoke test waits for the Ready graph")
	assert.NotEmpty(t, r.outputs["frontendService"])
}

// A terminal problem of a pod ends `up` with its reason instead of waiting out readiness.timeout;
// a problem that may clear only shows.
func TestATerminalPodProblemEndsTheWait(t *testing.T) {
	oom := cluster.PodProblem{Pod: "g-worker-abc", Component: "Worker", Node: "tray-03", Container: "main", Reason: "OOMKilled", Restarts: 1, LastReason: "OOMKilled", LastExitCode: 137, Terminal: true}
	pull := cluster.PodProblem{Pod: "g-frontend-x", Component: "Frontend", Node: "tray-01", Container: "main", Reason: "ImagePullBackOff", Message: "Back-off pulling image"}
	_, err := runWith(t, components.Options{Cluster: &watchingCluster{fakeCluster: fakeCluster{}, problems: []cluster.PodProblem{pull, oom}}}, "agg", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic cannot become Ready without a change: pod g-worker-abc (component Worker) on node tray-03, container main: OOMKilled")
	assert.Contains(t, err.Error(), "up stopped waiting instead of running into readiness.timeout, 2h")
	// The wait showed it on the graph: the run's error ("waiting for RPCs: ...") is marked so, and
	// components.Run and the Automation API's language runtime bail instead of showing it again.
	assert.True(t, components.Shown(err), "%v", err)
}

// At the end of its budget the wait names the operator's last Ready condition and the problems it
// saw; the budget is readiness.timeout for a create, and for an update as many times that as the
// rollout takes rounds (3 for the default worker rollout).
func TestTheGraphWaitsBudgetAndTimeoutMessage(t *testing.T) {
	pull := cluster.PodProblem{Pod: "g-frontend-x", Component: "Frontend", Node: "tray-01", Container: "main", Reason: "ImagePullBackOff", Message: "Back-off pulling image"}
	for before, want := range map[int64]time.Duration{0: 2 * time.Hour, 4: 6 * time.Hour} {
		w := &watchingCluster{fakeCluster: fakeCluster{}, before: before, problems: []cluster.PodProblem{pull}, budget: make(chan time.Duration, 1)}
		_, err := runWith(t, components.Options{Cluster: w}, "agg", nil)
		require.Error(t, err)
		assert.Equal(t, want, <-w.budget, "generation before: %d", before)
		assert.Contains(t, err.Error(), "was not Ready at generation 1 within "+want.String())
		assert.Contains(t, err.Error(), "; the operator's Ready condition: False, some_resources_are_not_ready: Worker: 1/3 ready; "+
			"its components: Worker 1 of 3 ready, 1 updated; "+
			"what kept its pods from running: pod g-frontend-x (component Frontend) on node tray-01, container main: ImagePullBackOff: Back-off pulling image")
	}
}

// What `up` takes as the graph Ready for what it wrote: Ready True observed at the generation or
// above (the condition's, else the status's), and with a restart ID, the restart at that ID
// finished. A Ready carrying no generation is not taken (the provider's wait would take it).
func TestReadyFor(t *testing.T) {
	graph := func(generation int64, condGen any, statusGen any, restart map[string]any) *unstructured.Unstructured {
		cond := map[string]any{"type": "Ready", "status": "True", "reason": "AllComponentsReady"}
		if condGen != nil {
			cond["observedGeneration"] = condGen
		}
		status := map[string]any{"state": "successful", "conditions": []any{cond}}
		if statusGen != nil {
			status["observedGeneration"] = statusGen
		}
		if restart != nil {
			status["restart"] = restart
		}
		g := &unstructured.Unstructured{Object: map[string]any{"status": status}}
		g.SetGeneration(generation)
		return g
	}
	assert.True(t, cluster.ReadyFor(graph(3, int64(3), nil, nil), 3, ""))
	assert.True(t, cluster.ReadyFor(graph(3, nil, int64(3), nil), 3, ""), "the status's generation when the condition has none")
	assert.True(t, cluster.ReadyFor(graph(4, int64(4), nil, nil), 3, ""), "a later generation than up wrote")
	assert.False(t, cluster.ReadyFor(graph(3, int64(2), nil, nil), 3, ""), "Ready for the spec before")
	assert.False(t, cluster.ReadyFor(graph(3, nil, nil, nil), 3, ""), "no generation to compare")
	done := map[string]any{"observedID": "r1", "phase": "Completed"}
	assert.True(t, cluster.ReadyFor(graph(3, int64(3), nil, done), 3, "r1"))
	assert.True(t, cluster.ReadyFor(graph(3, int64(3), nil, map[string]any{"observedID": "r1", "phase": "Superseded"}), 3, "r1"))
	assert.False(t, cluster.ReadyFor(graph(3, int64(3), nil, map[string]any{"observedID": "r1", "phase": "Restarting"}), 3, "r1"), "restart still running")
	assert.False(t, cluster.ReadyFor(graph(3, int64(3), nil, done), 3, "r2"), "an earlier restart")
	notReady := graph(3, int64(3), nil, nil)
	_ = unstructured.SetNestedField(notReady.Object, []any{map[string]any{"type": "Ready", "status": "False", "observedGeneration": int64(3)}}, "status", "conditions")
	assert.False(t, cluster.ReadyFor(notReady, 3, ""))
}

// A terminal problem of a pod that was there before `up` started (one the change may replace: an
// up raising the memory limit after an OOM kill) only shows; the wait goes on.
func TestATerminalProblemOfAnEarlierPodDoesNotEndTheWait(t *testing.T) {
	oom := cluster.PodProblem{Pod: "g-worker-old", Component: "Worker", Node: "tray-03", Container: "main", Reason: "OOMKilled", Terminal: true, Existing: true}
	w := &watchingCluster{fakeCluster: fakeCluster{}, before: 1, problems: []cluster.PodProblem{oom}, budget: make(chan time.Duration, 1)}
	_, err := runWith(t, components.Options{Cluster: w}, "agg", nil)
	require.Error(t, err)
	<-w.budget
	assert.NotContains(t, err.Error(), "cannot become Ready without a change")
	assert.Contains(t, err.Error(), "was not Ready at generation 1 within 6h0m0s")
	assert.Contains(t, err.Error(), "pod g-worker-old (component Worker) on node tray-03, container main: OOMKilled", "named among what it saw")
}

// An up that leaves the graph at the generation an earlier up saw Ready (a change elsewhere in
// the stack) does not wait for the graph again, as the provider waits only for a change; one
// whose earlier up never saw that generation Ready (it failed) waits.
func TestAnUpThatLeavesTheGraphAsItWasReadyDoesNotWait(t *testing.T) {
	for previous, waits := range map[string]int{"1": 0, "0": 1} {
		w := &watchingCluster{fakeCluster: fakeCluster{}, before: 1, ready: true}
		r, err := runPrevious(t, map[string]string{components.GraphReadyGenerationOutput: previous, "namespace": "inference", "graphName": "minimax-m3-agg-gb200-agentic"},
			components.Options{Cluster: w}, "agg", nil)
		require.NoError(t, err)
		assert.Equal(t, waits, w.waits, "an earlier up saw generation %s Ready", previous)
		assert.EqualValues(t, 1, r.outputs[components.GraphReadyGenerationOutput])
	}
}

// A program's own error (bad config, say) is shown once, on the stack, and marked shown.
func TestShowErrorsShowsAProgramsErrorOnce(t *testing.T) {
	bad := errors.New("profile: must be agg or disagg")
	err := pulumi.RunErr(components.ShowErrors(func(*pulumi.Context) error { return bad }), pulumi.WithMocks("minimax-m3", "agg", &mocks{}))
	require.ErrorIs(t, err, bad)
	assert.True(t, components.Shown(err))
	assert.False(t, components.Shown(bad))
	assert.False(t, components.Shown(nil))
	require.NoError(t, pulumi.RunErr(components.ShowErrors(func(*pulumi.Context) error { return nil }), pulumi.WithMocks("minimax-m3", "agg", &mocks{})))
}
