package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A recorded sequence of what the watches see of one pod, as a kubelet and the scheduler write it;
// the tracker is fed it step by step at the times given.

var t0 = time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)

func pendingPod(name, component string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{ComponentLabel: component}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
}

func scheduled(p *corev1.Pod, node string) *corev1.Pod {
	q := p.DeepCopy()
	q.Spec.NodeName = node
	return q
}

func withContainer(p *corev1.Pod, phase corev1.PodPhase, s corev1.ContainerStatus, ready bool) *corev1.Pod {
	q := p.DeepCopy()
	q.Status.Phase = phase
	s.Name = "main"
	q.Status.ContainerStatuses = []corev1.ContainerStatus{s}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	q.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return q
}

func waitingFor(reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}
}

var runningNow = corev1.ContainerStatus{Started: new(bool), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}

func reasons(ps []PodProblem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Reason)
	}
	return out
}

// A registry that times out is not terminal: the problem shows, and once no pod came further for
// the deadline while it persisted, one terminal problem names it, the node and what to do: once.
func TestTheProgressDeadlineNamesWhatPersisted(t *testing.T) {
	tr := newPodTracker(10*time.Minute, t0)
	p := pendingPod("g-frontend-a", "Frontend")
	assert.Empty(t, tr.pod(p, false, t0))
	p = scheduled(p, "cpu-01")
	assert.Empty(t, tr.pod(p, false, t0.Add(time.Second)))
	timeout := `failed to pull and unpack image "nvcr.io/nvidia/x:1": dial tcp 10.0.0.9:443: i/o timeout`
	p = withContainer(p, corev1.PodPending, waitingFor("ErrImagePull", timeout), false)
	got := tr.pod(p, false, t0.Add(5*time.Second))
	require.Equal(t, []string{"ErrImagePull"}, reasons(got))
	assert.False(t, got[0].Terminal, "a registry that times out may answer")
	// The kubelet backs off and retries: the same failure, no progress.
	p = withContainer(p, corev1.PodPending, waitingFor("ImagePullBackOff", `Back-off pulling image "nvcr.io/nvidia/x:1"`), false)
	assert.Equal(t, []string{"ImagePullBackOff"}, reasons(tr.pod(p, false, t0.Add(time.Minute))))

	assert.Empty(t, tr.expire(t0.Add(9*time.Minute)), "before the deadline")
	assert.Empty(t, tr.expire(t0.Add(10*time.Minute+2*time.Second)), "the pull has failed for less than the deadline (since 5 s)")
	got = tr.expire(t0.Add(10*time.Minute + 6*time.Second))
	require.Len(t, got, 1)
	assert.Equal(t, "ProgressDeadlineExceeded", got[0].Reason)
	assert.True(t, got[0].Terminal)
	assert.False(t, got[0].Existing, "a pod of the change")
	assert.True(t, strings.HasPrefix(got[0].String(), "ProgressDeadlineExceeded: no pod of the graph came further (created, scheduled, started, Ready) for 10m0s (readiness.progressDeadline) while: "+
		"pod g-frontend-a (component Frontend) on node cpu-01, container main: ImagePullBackOff"), got[0].String())
	assert.Contains(t, got[0].Message, "check that the nodes reach the registry and that the image exists")
	assert.Empty(t, tr.expire(t0.Add(20*time.Minute)), "once")
}

// An engine loading for hours with nothing wrong is not stuck; a pod coming further moves the
// deadline; a crash loop's restarts are no progress.
func TestProgressIsAPodComingFurther(t *testing.T) {
	tr := newPodTracker(10*time.Minute, t0)
	w := scheduled(pendingPod("g-worker-a", "Worker"), "tray-01")
	tr.pod(w, false, t0)
	w = withContainer(w, corev1.PodRunning, runningNow, false)
	tr.pod(w, false, t0.Add(time.Minute))
	assert.Empty(t, tr.expire(t0.Add(3*time.Hour)), "running, not Ready, nothing wrong: loading")

	tr = newPodTracker(10*time.Minute, t0)
	crash := func(restarts int32) corev1.ContainerStatus {
		s := waitingFor("CrashLoopBackOff", "back-off")
		s.RestartCount = restarts
		return s
	}
	w = scheduled(pendingPod("g-worker-b", "Worker"), "tray-02")
	tr.pod(withContainer(w, corev1.PodRunning, runningNow, false), false, t0)
	tr.pod(withContainer(w, corev1.PodRunning, crash(1), false), false, t0.Add(time.Minute))
	tr.pod(withContainer(w, corev1.PodRunning, runningNow, false), false, t0.Add(2*time.Minute))
	tr.pod(withContainer(w, corev1.PodRunning, crash(2), false), false, t0.Add(3*time.Minute))
	assert.Empty(t, tr.expire(t0.Add(10*time.Minute+time.Second)), "crashing since 3 m, not for the deadline")
	got := tr.expire(t0.Add(13*time.Minute + time.Second))
	require.Len(t, got, 1, "restarting is not coming further")
	assert.Contains(t, got[0].Message, "CrashLoopBackOff")

	// A first crash after a long load is new: not the deadline's.
	tr = newPodTracker(10*time.Minute, t0)
	tr.pod(withContainer(w, corev1.PodRunning, runningNow, false), false, t0)
	tr.pod(withContainer(w, corev1.PodRunning, crash(1), false), false, t0.Add(40*time.Minute))
	assert.Empty(t, tr.expire(t0.Add(40*time.Minute+10*time.Second)))

	// The frontend waits for a worker to register, failing its readiness probe meanwhile: while the
	// worker loads, that is no reason to stop.
	tr = newPodTracker(10*time.Minute, t0)
	loadingWorker := withContainer(scheduled(pendingPod("g-worker-d", "Worker"), "tray-04"), corev1.PodRunning, runningNow, false)
	fe := withContainer(scheduled(pendingPod("g-frontend-d", "Frontend"), "cpu-01"), corev1.PodRunning, runningNow, false)
	tr.pod(loadingWorker, false, t0)
	tr.pod(fe, false, t0)
	tr.event(fe.UID, PodProblem{Pod: fe.Name, Reason: "Unhealthy", Message: "Readiness probe failed: no endpoints"}, t0.Add(time.Minute))
	tr.event(fe.UID, PodProblem{Pod: fe.Name, Reason: "Unhealthy", Message: "Readiness probe failed: no endpoints"}, t0.Add(50*time.Minute))
	assert.Empty(t, tr.expire(t0.Add(55*time.Minute)), "a worker is loading")

	tr = newPodTracker(10*time.Minute, t0)
	tr.pod(withContainer(w, corev1.PodPending, waitingFor("ImagePullBackOff", "Back-off pulling image"), false), false, t0)
	tr.pod(withContainer(scheduled(pendingPod("g-worker-c", "Worker"), "tray-03"), corev1.PodRunning, runningNow, true), false, t0.Add(8*time.Minute))
	assert.Empty(t, tr.expire(t0.Add(12*time.Minute)), "another pod became Ready at 8m: the deadline runs from there")
	assert.NotEmpty(t, tr.expire(t0.Add(18*time.Minute+time.Second)))
}

// The registry's answer that the tag does not exist is terminal at once, from the container's
// status or from the kubelet's Failed event.
func TestAMissingTagIsTerminal(t *testing.T) {
	tr := newPodTracker(10*time.Minute, t0)
	p := scheduled(pendingPod("g-worker-a", "Worker"), "tray-01")
	notFound := `failed to pull and unpack image "nvcr.io/nvidia/x:no-such-tag": failed to resolve reference "nvcr.io/nvidia/x:no-such-tag": nvcr.io/nvidia/x:no-such-tag: not found`
	got := tr.pod(withContainer(p, corev1.PodPending, waitingFor("ErrImagePull", notFound), false), false, t0)
	require.Len(t, got, 1)
	assert.True(t, got[0].Terminal)

	tr = newPodTracker(10*time.Minute, t0)
	q := scheduled(pendingPod("g-worker-b", "Worker"), "tray-02")
	tr.pod(q, false, t0)
	ev := &corev1.Event{Type: corev1.EventTypeWarning, Reason: "Failed", Message: `Failed to pull image "nvcr.io/nvidia/x:no-such-tag": ` + notFound,
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: q.Name, UID: q.UID, FieldPath: "spec.containers{main}"}, Source: corev1.EventSource{Host: "tray-02"}}
	problem, ok := eventProblem(ev)
	require.True(t, ok)
	got = tr.event(q.UID, problem, t0.Add(time.Second))
	require.Len(t, got, 1)
	assert.Equal(t, "ErrImagePull", got[0].Reason)
	assert.Equal(t, "main", got[0].Container)
	assert.True(t, got[0].Terminal)
}

// A container that runs and is never Ready names its failing probe from the kubelet's Unhealthy
// event, once per message; a startup probe failing (an engine loading) is no problem.
func TestAFailingReadinessProbeIsNamed(t *testing.T) {
	tr := newPodTracker(10*time.Minute, t0)
	fe := withContainer(scheduled(pendingPod("g-frontend-a", "Frontend"), "cpu-01"), corev1.PodRunning, runningNow, false)
	tr.pod(fe, false, t0)
	unhealthy := func(msg string) (PodProblem, bool) {
		return eventProblem(&corev1.Event{Type: corev1.EventTypeWarning, Reason: "Unhealthy", Message: msg,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: fe.Name, UID: fe.UID, FieldPath: "spec.containers{main}"}, Source: corev1.EventSource{Host: "cpu-01"}})
	}
	_, ok := unhealthy("Startup probe failed: HTTP probe failed with statuscode: 503")
	assert.False(t, ok, "a startup probe failing is what loading looks like")
	p, ok := unhealthy("Readiness probe failed: HTTP probe failed with statuscode: 503")
	require.True(t, ok)
	got := tr.event(fe.UID, p, t0.Add(10*time.Second))
	require.Len(t, got, 1)
	assert.Equal(t, "pod g-frontend-a (component Frontend) on node cpu-01, container main: Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 503", got[0].String())
	assert.Empty(t, tr.event(fe.UID, p, t0.Add(20*time.Second)), "the kubelet repeats it: once")
	got = tr.expire(t0.Add(10*time.Minute + 11*time.Second))
	require.Len(t, got, 1)
	assert.Contains(t, got[0].Message, "Readiness probe failed")
	assert.Contains(t, got[0].Message, "kubectl logs")
	// Ready after all: the event no longer applies.
	tr = newPodTracker(10*time.Minute, t0)
	tr.pod(fe, false, t0)
	tr.event(fe.UID, p, t0.Add(10*time.Second))
	tr.pod(withContainer(fe, corev1.PodRunning, runningNow, true), false, t0.Add(time.Minute))
	assert.Empty(t, tr.blockers(t0.Add(2*time.Minute)))
}

// A worker held for its tray's IMEX daemon: the kubelet's event says what it waits for; at the
// deadline it is named with where to look.
func TestAWorkerHeldForItsIMEXDaemonEndsAtTheDeadline(t *testing.T) {
	tr := newPodTracker(10*time.Minute, t0)
	w := withContainer(scheduled(pendingPod("g-worker-a", "Worker"), "tray-07"), corev1.PodPending, corev1.ContainerStatus{}, false)
	w.Status.ContainerStatuses = nil
	tr.pod(w, false, t0)
	msg := "Failed to prepare dynamic resources: NodePrepareResources: DeadlineExceeded (IMEX chain of ComputeDomain g-cd on node tray-07: " +
		"IMEX daemon pod nvidia-dra-driver-gpu/d runs but is not Ready → the node is NotReady in the domain's status.nodes → so the worker's channel claim is not prepared)"
	held := PodProblem{Pod: w.Name, Node: "tray-07", Reason: "FailedPrepareDynamicResources", Message: msg}
	got := tr.event(w.UID, held, t0.Add(time.Second))
	require.Len(t, got, 1)
	// The kubelet retries and records the same failure again: held since the first.
	assert.Empty(t, tr.event(w.UID, held, t0.Add(9*time.Minute)), "told once")
	got = tr.expire(t0.Add(10*time.Minute + time.Second))
	require.Len(t, got, 1)
	assert.True(t, strings.Contains(got[0].Message, "IMEX chain of ComputeDomain g-cd on node tray-07"), got[0].Message)
	assert.Contains(t, got[0].Message, "kubectl -n nvidia-dra-driver-gpu get pods -o wide")
	assert.Contains(t, got[0].Message, "on node tray-07")

	// An event the kubelet stopped recording (the tray's daemon came up, the pod then pulls its
	// large image for a long time) is history, not a blocker.
	tr = newPodTracker(10*time.Minute, t0)
	tr.pod(w, false, t0)
	tr.event(w.UID, held, t0.Add(time.Second))
	assert.Empty(t, tr.expire(t0.Add(25*time.Minute)))
}

// The pods were there when the wait began (the operator made them before the watch listed them):
// their lasting problem still ends the wait, since a rollout that made no progress for the
// deadline is not replacing them either.
func TestTheDeadlineCountsPodsThereAtTheStart(t *testing.T) {
	tr := newPodTracker(10*time.Minute, t0)
	p := withContainer(scheduled(pendingPod("g-frontend-a", "Frontend"), "cpu-01"), corev1.PodPending, waitingFor("ErrImagePull", "dial tcp 10.0.0.9:443: i/o timeout"), false)
	tr.listedPods([]corev1.Pod{*p})
	got := tr.pod(p, false, t0)
	require.Len(t, got, 1)
	assert.True(t, got[0].Existing)
	got = tr.expire(t0.Add(10*time.Minute + time.Second))
	require.Len(t, got, 1)
	assert.False(t, got[0].Existing)
}

// The IMEX chain on a tray is named stage by stage, up to the stage that holds it: the daemon pod
// (none, not pulled, not Ready, unreadable), the tray in the ComputeDomain's status, the claim.
func TestTheIMEXChainIsNamedStageByStage(t *testing.T) {
	daemon := func(phase corev1.PodPhase, ready bool, waiting *corev1.ContainerStateWaiting) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "nvidia-dra-driver-gpu", Name: "computedomain-daemon-x"}, Status: corev1.PodStatus{Phase: phase}}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "compute-domain-daemon", State: corev1.ContainerState{Waiting: waiting}}}
		return p
	}
	chain := IMEXChain{Domain: "g-cd", Node: "tray-07"}
	assert.Equal(t, "IMEX chain of ComputeDomain g-cd on node tray-07: no IMEX daemon pod on the node (the domain's DaemonSet places one on a tray labelled "+
		"resource.nvidia.com/computeDomain once the kubelet plugin labels it: the label, the DaemonSet's pods and the driver's kubelet plugin) → "+
		"the node is not in the domain's status.nodes (a daemon enters it once it runs) → so the worker's channel claim is not prepared", chain.String())

	chain.Daemons = []corev1.Pod{daemon(corev1.PodPending, false, &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "nvcr.io/x"`})}
	assert.Contains(t, chain.String(), `: IMEX daemon pod nvidia-dra-driver-gpu/computedomain-daemon-x is Pending, container compute-domain-daemon: ImagePullBackOff: Back-off pulling image "nvcr.io/x" → the node is not in`)

	chain.Daemons, chain.NodeStatus = []corev1.Pod{daemon(corev1.PodRunning, false, nil)}, "NotReady"
	assert.Contains(t, chain.String(), ": IMEX daemon pod nvidia-dra-driver-gpu/computedomain-daemon-x runs but is not Ready (IMEX has not joined its peers: the daemon's log) → "+
		"the node is NotReady in the domain's status.nodes (Ready once its daemon is) → so the worker's channel claim is not prepared")

	// Ready, and the controller has not yet copied the tray into the domain's status.
	chain.Daemons, chain.NodeStatus = []corev1.Pod{daemon(corev1.PodRunning, true, nil)}, ""
	assert.Contains(t, chain.String(), "computedomain-daemon-x is Ready → the node is not in the domain's status.nodes")

	// The driver's namespace is not the team's to read: said, and the rest still named.
	chain.Daemons, chain.DaemonsErr = nil, errors.New(`pods is forbidden: User "system:serviceaccount:team-a:minimax-m3-team-a" cannot list resource "pods"`)
	assert.Contains(t, chain.String(), ": its IMEX daemon pod: cannot be read (pods is forbidden: ")
	assert.Contains(t, chain.String(), "→ the node is not in the domain's status.nodes")

	// Ready in the domain: the claim's wait is not the chain's.
	chain.NodeStatus = "Ready"
	assert.Empty(t, chain.String())
}

// A controller of the graph that makes no pod says why in its FailedCreate event: terminal when
// admission refused the pod (it refuses again on every retry), not when the cause may clear (a
// quota). The pod's generated name, new at each retry, is left out, so a retry reads the same.
func TestAControllerThatMakesNoPodIsNamed(t *testing.T) {
	event := func(message string) *corev1.Event {
		return &corev1.Event{Type: corev1.EventTypeWarning, Reason: "FailedCreate", Message: message,
			InvolvedObject: corev1.ObjectReference{Kind: "ReplicaSet", Name: "g-frontend-7d9", UID: "rs"}}
	}
	for _, tc := range []struct {
		message, says string
		terminal      bool
	}{
		{`Error creating: pods "g-frontend-7d9-x1" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`,
			`Error creating: pods "…" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`, true},
		{`Error creating: pods "g-frontend-7d9-x2" is forbidden: ValidatingAdmissionPolicy 'site' with binding 'site' denied request: no`,
			`Error creating: pods "…" is forbidden: ValidatingAdmissionPolicy 'site' with binding 'site' denied request: no`, true},
		{`Error creating: admission webhook "validate.kyverno.svc" denied the request: images must be signed`,
			`Error creating: admission webhook "validate.kyverno.svc" denied the request: images must be signed`, true},
		{`Error creating: pods "g-frontend-7d9-x3" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=12, limited: requests.nvidia.com/gpu=12`,
			`Error creating: pods "…" is forbidden: exceeded quota: gpus`, false},
	} {
		p, ok := CreateProblem(event(tc.message))
		require.True(t, ok, tc.message)
		assert.True(t, strings.HasPrefix(p.String(), "FailedCreate: ReplicaSet g-frontend-7d9 makes no pod: "+tc.says), p.String())
		assert.Equal(t, tc.terminal, p.Terminal, tc.message)
	}
	other := event("x")
	other.Reason = "SuccessfulCreate"
	_, ok := CreateProblem(other)
	assert.False(t, ok, "not a failure")

	// Told once while the controller retries with the same refusal (another pod name each time);
	// again when it says something new.
	t0 := time.Now()
	tr := newPodTracker(10*time.Minute, t0)
	refused := func(name string, at time.Time) []PodProblem {
		p, _ := CreateProblem(event(`Error creating: pods "` + name + `" is forbidden: violates PodSecurity "baseline:latest": privileged`))
		return tr.controller("rs", p, at)
	}
	require.Len(t, refused("g-frontend-7d9-a", t0), 1)
	assert.Empty(t, refused("g-frontend-7d9-b", t0.Add(time.Minute)), "the same refusal, retried")
	p, _ := CreateProblem(event(`Error creating: pods "g-frontend-7d9-c" is forbidden: exceeded quota: pods`))
	assert.Len(t, tr.controller("rs", p, t0.Add(2*time.Minute)), 1, "something new")
}

// A controller from before the watch (an earlier rollout's) whose refusal persists ends the wait
// at the progress deadline, naming it; a pod of the graph that comes further in the meantime
// starts the deadline over.
func TestARefusalThatPersistsEndsAtTheProgressDeadline(t *testing.T) {
	t0 := time.Now()
	tr := newPodTracker(10*time.Minute, t0)
	p, _ := CreateProblem(&corev1.Event{Type: corev1.EventTypeWarning, Reason: "FailedCreate",
		Message:        `Error creating: pods "g-frontend-7d9-a" is forbidden: ValidatingAdmissionPolicy 'site' with binding 'site' denied request: no`,
		InvolvedObject: corev1.ObjectReference{Kind: "ReplicaSet", Name: "g-frontend-7d9", UID: "rs"}})
	p.Existing = true
	require.Len(t, tr.controller("rs", p, t0.Add(time.Second)), 1)
	assert.Empty(t, tr.expire(t0.Add(9*time.Minute)), "not yet")
	tr.controller("rs", p, t0.Add(9*time.Minute)) // retried
	got := tr.expire(t0.Add(10*time.Minute + 2*time.Second))
	require.Len(t, got, 1)
	assert.Equal(t, "ProgressDeadlineExceeded", got[0].Reason)
	assert.True(t, got[0].Terminal)
	assert.Contains(t, got[0].Message, `FailedCreate: ReplicaSet g-frontend-7d9 makes no pod: Error creating: pods "…" is forbidden: ValidatingAdmissionPolicy 'site'`)
	assert.Contains(t, got[0].Message, "a policy's owner, or the setting it refuses")
}
