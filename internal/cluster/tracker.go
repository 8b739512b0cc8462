package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// outOfServiceTaints are the taints Kubernetes puts on a node out of service (cordoned, NotReady,
// unreachable): the condition itself, not a reason the pod could never go there.
var outOfServiceTaints = []string{corev1.TaintNodeUnschedulable, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}

// outOfServiceShown is how many out-of-service nodes an unschedulable pod's account names.
const outOfServiceShown = 5

// shownBlockers is how many of the problems that persist a progress deadline's problem names.
const shownBlockers = 3

// problemKey is a problem as reported once: a problem is reported again only when one of these
// changes.
type problemKey struct {
	pod, container, node, reason, outOfService string
	terminal                                   bool
}

func keyOf(p PodProblem) problemKey {
	return problemKey{p.Pod, p.Container, p.Node, p.Reason, p.OutOfService, p.Terminal}
}

// podTracker is the state of a graph's pods, the nodes under them and the kubelet's events on them,
// as the watches report it (WatchPodProblems feeds it, under one lock): each method takes what a
// watch saw and returns the problems to report now, with no I/O. A problem is returned once while
// it lasts, and again when it changes or comes back after it cleared.
type podTracker struct {
	// deadline is the progress deadline (0: none); lastProgress the last time a pod of the graph
	// came further (created, scheduled, started, Ready, or deleted), or the watch's start.
	deadline     time.Duration
	lastProgress time.Time
	expired      bool

	existing map[string]bool              // the pods there at the start
	seen     map[problemKey]PodProblem    // the problems reported that still hold, in their latest words
	troubled map[string]time.Time         // pod → since when it has had a problem, without coming further
	podsOn   map[string]map[string]string // node → pod → component
	nodeOf   map[string]string            // pod → node
	bad      map[string]*corev1.Node      // node → the node, while it is out of service
	waiting  map[string]*corev1.Pod       // unschedulable pods
	pods     map[string]*corev1.Pod       // every pod of the graph, as last seen
	stage    map[types.UID]int            // pod → the furthest stage it reached (podStage)
	latest   map[types.UID]startEvent     // pod → the kubelet's newest event on it
	told     map[types.UID]map[string]bool
	// controllers are the graph's controllers that make no pod: each one's newest FailedCreate.
	controllers map[types.UID]startEvent
}

func newPodTracker(deadline time.Duration, now time.Time) *podTracker {
	return &podTracker{deadline: deadline, lastProgress: now,
		existing: map[string]bool{}, seen: map[problemKey]PodProblem{}, troubled: map[string]time.Time{}, podsOn: map[string]map[string]string{}, nodeOf: map[string]string{},
		bad: map[string]*corev1.Node{}, waiting: map[string]*corev1.Pod{}, pods: map[string]*corev1.Pod{}, stage: map[types.UID]int{},
		latest: map[types.UID]startEvent{}, told: map[types.UID]map[string]bool{}, controllers: map[types.UID]startEvent{}}
}

// controller takes a FailedCreate of one of the graph's controllers (CreateProblem), seen at now:
// reported once while it says the same (the controller retries with back-off, and records it
// again), again when it says something new.
func (t *podTracker) controller(uid types.UID, p PodProblem, now time.Time) []PodProblem {
	cur, known := t.controllers[uid]
	if known && cur.problem.Message == p.Message {
		cur.at = now
		t.controllers[uid] = cur
		return nil
	}
	t.controllers[uid] = startEvent{problem: p, at: now, first: now}
	return []PodProblem{p}
}

// listedNodes takes the nodes' first listing.
func (t *podTracker) listedNodes(nodes []corev1.Node) {
	for i := range nodes {
		if _, _, isBad := NodeProblemOf(&nodes[i]); isBad {
			t.bad[nodes[i].Name] = &nodes[i]
		}
	}
}

// listedPods takes the pods' first listing: the pods there at the start, which the change `up`
// makes may replace.
func (t *podTracker) listedPods(pods []corev1.Pod) {
	for i := range pods {
		t.existing[pods[i].Name] = true
		t.stage[pods[i].UID] = podStage(&pods[i])
	}
}

// node takes a node's change, at now.
func (t *podTracker) node(n *corev1.Node, deleted bool, now time.Time) []PodProblem {
	if _, _, isBad := NodeProblemOf(n); isBad && !deleted {
		t.bad[n.Name] = n
	} else {
		delete(t.bad, n.Name)
	}
	out := t.nodeProblems(n.Name)
	// An unschedulable pod's account names the nodes out of service it could use.
	for _, name := range slices.Sorted(maps.Keys(t.waiting)) {
		out = append(out, t.podProblems(name, t.problemsOf(t.waiting[name]))...)
	}
	for pod := range t.podsOn[n.Name] {
		t.settle(pod, now)
	}
	return out
}

// pod takes a pod's change, at now.
func (t *podTracker) pod(p *corev1.Pod, deleted bool, now time.Time) []PodProblem {
	if old := t.nodeOf[p.Name]; old != "" {
		delete(t.podsOn[old], p.Name)
	}
	delete(t.nodeOf, p.Name)
	delete(t.waiting, p.Name)
	if deleted || p.DeletionTimestamp != nil {
		if _, known := t.pods[p.Name]; known {
			t.lastProgress = now // the rollout takes an old pod away
		}
		delete(t.pods, p.Name)
		delete(t.latest, p.UID)
		delete(t.told, p.UID)
		delete(t.troubled, p.Name)
		return t.podProblems(p.Name, nil)
	}
	t.pods[p.Name] = p
	if stage, known := t.stage[p.UID]; !known || podStage(p) > stage {
		t.stage[p.UID] = max(stage, podStage(p))
		t.lastProgress = now
		delete(t.troubled, p.Name) // what holds it now holds it from here
	}
	var out []PodProblem
	if e, ok := t.latest[p.UID]; ok && !eventApplies(e.problem, p) {
		delete(t.latest, p.UID) // the pod moved on: its newest event is history
		delete(t.told, p.UID)
	}
	out = append(out, t.tellEvent(p)...)
	ps := t.problemsOf(p)
	if len(ps) == 1 && ps[0].Reason == corev1.PodReasonUnschedulable {
		t.waiting[p.Name] = p
	}
	out = append(out, t.podProblems(p.Name, ps)...)
	if p.Spec.NodeName != "" {
		t.nodeOf[p.Name] = p.Spec.NodeName
		if t.podsOn[p.Spec.NodeName] == nil {
			t.podsOn[p.Spec.NodeName] = map[string]string{}
		}
		t.podsOn[p.Spec.NodeName][p.Name] = p.Labels[ComponentLabel]
		out = append(out, t.nodeProblems(p.Spec.NodeName)...)
	}
	t.settle(p.Name, now)
	return out
}

// event takes the kubelet's event on a pod (its problem, eventProblem, and when it happened): kept
// per pod, the newest, whether or not the pod is known yet (the events may be listed before the
// pods), and reported while it applies to the pod.
func (t *podTracker) event(uid types.UID, p PodProblem, at time.Time) []PodProblem {
	first := at
	if cur, known := t.latest[uid]; known {
		if cur.at.After(at) {
			return nil // an older event, replayed by a relist
		}
		if cur.problem.Reason == p.Reason && cur.problem.Message == p.Message {
			first = cur.first // the kubelet's retry of the same failure
		}
	}
	if len(t.latest) >= maxStartEvents {
		for k := range t.latest { // most are other graphs' pods, or gone
			delete(t.latest, k)
			break
		}
	}
	t.latest[uid] = startEvent{problem: p, at: at, first: first}
	if pod := t.pods[p.Pod]; pod != nil && pod.UID == uid {
		out := t.tellEvent(pod)
		t.settle(pod.Name, at)
		return out
	}
	return nil
}

// replayed reports whether an event at is older than the newest kept for the pod (a relist's).
func (t *podTracker) replayed(uid types.UID, at time.Time) bool {
	cur, known := t.latest[uid]
	return known && cur.at.After(at)
}

// eventApplies reports whether an event's problem is the pod's now: a start event while it is
// placed and not running, a probe's failure while it runs and is not Ready.
func eventApplies(p PodProblem, pod *corev1.Pod) bool {
	if p.Reason == "Unhealthy" {
		return pod.Status.Phase == corev1.PodRunning && !podReady(pod)
	}
	return pod.Spec.NodeName != "" && pod.Status.Phase == corev1.PodPending
}

// tellEvent reports the kubelet's newest event on a pod, once per reason and message while it
// applies (a kubelet repeats its event at each retry, and may alternate two messages of one
// failure).
func (t *podTracker) tellEvent(pod *corev1.Pod) []PodProblem {
	e, ok := t.latest[pod.UID]
	if !ok || !eventApplies(e.problem, pod) {
		return nil
	}
	k := e.problem.Reason + "\x00" + e.problem.Message
	if t.told[pod.UID][k] {
		return nil
	}
	if t.told[pod.UID] == nil {
		t.told[pod.UID] = map[string]bool{}
	}
	t.told[pod.UID][k] = true
	p := e.problem
	p.Pod, p.Component, p.Node, p.Existing = pod.Name, pod.Labels[ComponentLabel], pod.Spec.NodeName, t.existing[pod.Name]
	return []PodProblem{p}
}

// expire is the progress deadline's problem, once: no pod of the graph came further for the
// deadline while problems persisted for that long (those are named, with what to do). Nothing while
// any pod comes further; while a pod runs, not Ready, with no problem of its own (an engine loading:
// the frontend's readiness waits for a worker to register, and that may take hours); for a problem
// newer than the deadline (a first crash, a node briefly NotReady); or with no deadline. It is never
// Existing, whichever pods it names: a rollout that made no progress for the deadline is not
// replacing them either.
func (t *podTracker) expire(now time.Time) []PodProblem {
	if t.deadline <= 0 || t.expired || now.Sub(t.lastProgress) < t.deadline || t.loading() {
		return nil
	}
	var blockers []PodProblem
	for _, b := range t.blockers(now) {
		if since, ok := t.troubled[b.Pod]; ok && now.Sub(since) >= t.deadline {
			blockers = append(blockers, b)
		}
	}
	// A controller that has made no pod since the last progress, for the deadline: its refusal
	// is why nothing came further.
	for _, uid := range slices.Sorted(maps.Keys(t.controllers)) {
		if e := t.controllers[uid]; !e.at.Before(t.lastProgress) && now.Sub(e.first) >= t.deadline {
			blockers = append(blockers, e.problem)
		}
	}
	if len(blockers) == 0 {
		return nil
	}
	t.expired = true
	var lines []string
	for _, b := range blockers[:min(len(blockers), shownBlockers)] {
		lines = append(lines, b.String()+" ("+remedy(b.Reason)+")")
	}
	if len(blockers) > shownBlockers {
		lines = append(lines, fmt.Sprintf("and %d more", len(blockers)-shownBlockers))
	}
	return []PodProblem{{Reason: "ProgressDeadlineExceeded", Terminal: true,
		Message: fmt.Sprintf("no pod of the graph came further (created, scheduled, started, Ready) for %s (readiness.progressDeadline) while: %s",
			t.deadline, strings.Join(lines, "; "))}}
}

// settle notes since when a pod has had a problem (a reported one of its own or of its node, or
// the kubelet's event on it), or that it has none.
func (t *podTracker) settle(name string, now time.Time) {
	troubled := false
	for k := range t.seen {
		troubled = troubled || k.pod == name
	}
	if pod := t.pods[name]; pod != nil {
		if e, ok := t.latest[pod.UID]; ok && eventApplies(e.problem, pod) {
			troubled = true
			if since, ok := t.troubled[name]; !ok || e.first.Before(since) {
				t.troubled[name] = e.first
			}
		}
	}
	if !troubled {
		delete(t.troubled, name)
	} else if _, ok := t.troubled[name]; !ok {
		t.troubled[name] = now
	}
}

// loading reports a pod that runs, is not Ready and has no problem of its own: an engine loading.
func (t *podTracker) loading() bool {
	for _, pod := range t.pods {
		if pod.Status.Phase != corev1.PodRunning || podReady(pod) || len(ProblemsOf(pod)) > 0 {
			continue
		}
		if e, ok := t.latest[pod.UID]; ok && eventApplies(e.problem, pod) {
			continue // its probe fails: a problem of its own
		}
		return true
	}
	return false
}

// staleEvent is how long after the kubelet last recorded a failure its event stops counting: the
// kubelet records a failure that persists again at each retry (its back-off reaches 5 minutes).
const staleEvent = 5 * time.Minute

// blockers are the problems that hold now, of pods not Ready: the pods' and their nodes' (seen),
// and the kubelet's newest event on each pod where it still applies and is recent; by pod.
func (t *podTracker) blockers(now time.Time) []PodProblem {
	var out []PodProblem
	for _, p := range t.seen {
		if pod := t.pods[p.Pod]; p.Pod != "" && (pod == nil || !podReady(pod)) {
			out = append(out, p)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.pods)) {
		pod := t.pods[name]
		if e, ok := t.latest[pod.UID]; ok && eventApplies(e.problem, pod) && now.Sub(e.at) < max(t.deadline, staleEvent) {
			p := e.problem
			p.Pod, p.Component, p.Node, p.Existing = pod.Name, pod.Labels[ComponentLabel], pod.Spec.NodeName, t.existing[pod.Name]
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b PodProblem) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// remedy is what to do about a blocker, by its reason.
func remedy(reason string) string {
	switch reason {
	case "ErrImagePull", "ImagePullBackOff":
		return "check that the nodes reach the registry and that the image exists: image, imagePullSecrets"
	case "FailedPrepareDynamicResources":
		return "the tray's IMEX daemon: kubectl -n nvidia-dra-driver-gpu get pods -o wide, and the ComputeDomain's status"
	case "Unhealthy":
		return "the container's log: kubectl logs; its probe: <role>.probes"
	case "FailedCreate":
		return "what the API server's answer names: a policy's owner, or the setting it refuses (often a podTemplatePatch)"
	case corev1.PodReasonUnschedulable:
		return "free room, or move the graph: placement.clique"
	case "NodeNotReady", "NodeCordoned":
		return "the node's state: kubectl describe node"
	case "FailedMount", "FailedAttachVolume":
		return "the volume: modelCache"
	}
	return "docs/day-two.md#troubleshooting"
}

// problemsOf are a pod's problems, an unschedulable one's with the nodes out of service it could
// use.
func (t *podTracker) problemsOf(pod *corev1.Pod) []PodProblem {
	ps := ProblemsOf(pod)
	for i := range ps {
		if ps[i].Reason == corev1.PodReasonUnschedulable {
			ps[i].OutOfService = t.outOfService(pod)
		}
	}
	return ps
}

// outOfService names the bad nodes an unschedulable pod could run on: its node selector and
// required affinity match them, and it tolerates their taints (but those that say the node is out
// of service). Another team's cordoned nodes, which the pod could never use, are not its account; at
// most outOfServiceShown are named.
func (t *podTracker) outOfService(pod *corev1.Pod) string {
	var out []string
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	for _, name := range slices.Sorted(maps.Keys(t.bad)) {
		n := t.bad[name]
		if ok, err := affinity.Match(n); err != nil || !ok {
			continue
		}
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations, func(tt *corev1.Taint) bool {
			return (tt.Effect == corev1.TaintEffectNoSchedule || tt.Effect == corev1.TaintEffectNoExecute) && !slices.Contains(outOfServiceTaints, tt.Key)
		}, false); untolerated {
			continue
		}
		reason, _, _ := NodeProblemOf(n)
		out = append(out, fmt.Sprintf("%s (%s)", name, reason))
	}
	if len(out) > outOfServiceShown {
		out = append(out[:outOfServiceShown], fmt.Sprintf("and %d more", len(out)-outOfServiceShown))
	}
	return strings.Join(out, ", ")
}

// podProblems returns a pod's current problems not yet reported, and forgets those it no longer has.
func (t *podTracker) podProblems(pod string, problems []PodProblem) []PodProblem {
	var out []PodProblem
	current := map[problemKey]bool{}
	for _, p := range problems {
		p.Existing = t.existing[p.Pod]
		k := keyOf(p)
		current[k] = true
		if t.reported(k) {
			t.seen[k] = p // its latest words (a restart count, the scheduler's message)
			continue
		}
		t.seen[k] = p
		out = append(out, p)
	}
	gone := problems == nil // the pod is deleted: its node's problems go with it
	for k := range t.seen {
		if k.pod == pod && !current[k] && (gone || !strings.HasPrefix(k.reason, "Node")) {
			delete(t.seen, k)
		}
	}
	return out
}

// nodeProblems returns the problem of a bad node for each pod on it not yet told, and forgets a
// node's problems that cleared or changed (reported again if they come back).
func (t *podTracker) nodeProblems(node string) []PodProblem {
	n, isBad := t.bad[node]
	reason, message := "", ""
	if isBad {
		reason, message, _ = NodeProblemOf(n)
	}
	for k := range t.seen {
		if k.node == node && strings.HasPrefix(k.reason, "Node") && (!isBad || k.reason != reason) {
			delete(t.seen, k)
		}
	}
	if !isBad {
		return nil
	}
	var out []PodProblem
	for _, pod := range slices.Sorted(maps.Keys(t.podsOn[node])) {
		p := PodProblem{Pod: pod, Component: t.podsOn[node][pod], Node: node, Reason: reason, Message: message, Existing: t.existing[pod]}
		if k := keyOf(p); !t.reported(k) {
			t.seen[k] = p
			out = append(out, p)
		}
	}
	return out
}

func (t *podTracker) reported(k problemKey) bool {
	_, ok := t.seen[k]
	return ok
}
