package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"minimax-m3/internal/objwatch"
)

// PodProblem is what keeps a pod of the graph from running, or from staying up, as Kubernetes
// reports it: the scheduler's verdict, a container's waiting reason or last termination, or the
// state of the node under the pod.
type PodProblem struct {
	Pod, Component string
	// Node is the node the pod is bound to ("" while it is not); Container the container the
	// reason is about ("" for the pod or its node).
	Node, Container string
	// Reason is Kubernetes' own: Unschedulable, ErrImagePull, ImagePullBackOff, InvalidImageName,
	// ErrImageNeverPull, CreateContainerConfigError, CreateContainerError, RunContainerError,
	// CrashLoopBackOff, OOMKilled, NodeNotReady or NodeCordoned; one of the kubelet's events on a
	// pod that has not started (FailedPrepareDynamicResources, FailedMount, FailedAttachVolume,
	// FailedCreatePodSandBox); NodesUnread (no pod) when the credential may not list nodes.
	Reason, Message string
	// Restarts is the container's restart count; LastReason and LastExitCode how its previous run
	// ended (Error, OOMKilled).
	Restarts     int32
	LastReason   string
	LastExitCode int32
	// Terminal is a state that does not clear without a change: a retry cannot fix it (TerminalOf).
	Terminal bool
	// Existing: the pod was there when the watch started (WatchPodProblems), so the change `up`
	// is making may replace it; a problem of a pod made since is one of the change itself.
	Existing bool
	// OutOfService, for an unschedulable pod, are the nodes it could run on (its node selector
	// and required affinity match them) that are cordoned or NotReady, each "name (reason)": a
	// tray drained for maintenance is why its replacement finds no room on a full rack. Joined by
	// ", " (a PodProblem stays comparable).
	OutOfService string
}

// CrashLoopTerminalRestarts is the number of restarts after which a container in CrashLoopBackOff
// counts as terminal: an engine that has failed that often and is failing again fails for a reason
// a restart does not fix.
const CrashLoopTerminalRestarts = 3

// String is the problem as `up` shows it: the pod, node and container, the reason and the message.
func (p PodProblem) String() string {
	if p.Pod == "" {
		return p.Reason + ": " + p.Message
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s", p.Pod)
	if p.Component != "" {
		fmt.Fprintf(&b, " (component %s)", p.Component)
	}
	if p.Reason == corev1.PodReasonUnschedulable {
		fmt.Fprintf(&b, " cannot be scheduled: %s: %s", p.Reason, p.Message)
		if p.OutOfService != "" {
			fmt.Fprintf(&b, "; out of service among the nodes it could run on: %s", p.OutOfService)
		}
		return b.String()
	}
	if p.Node != "" {
		fmt.Fprintf(&b, " on node %s", p.Node)
	}
	if p.Container != "" {
		fmt.Fprintf(&b, ", container %s", p.Container)
	}
	fmt.Fprintf(&b, ": %s", p.Reason)
	if p.Restarts > 0 {
		fmt.Fprintf(&b, " (%d restarts", p.Restarts)
		if p.LastReason != "" {
			fmt.Fprintf(&b, ", last exit %s, code %d", p.LastReason, p.LastExitCode)
		}
		b.WriteString(")")
	}
	if p.Message != "" {
		fmt.Fprintf(&b, ": %s", p.Message)
	}
	return b.String()
}

// Why each reason is, or is not, terminal:
//   - InvalidImageName, ErrImageNeverPull: the pod's spec names an image that cannot be pulled, and
//     only a new spec changes that;
//   - OOMKilled, in a container not Ready: the memory limit does not grow by itself, and the
//     engine allocates the same at its next start;
//   - CrashLoopBackOff after CrashLoopTerminalRestarts restarts;
//   - not terminal: ErrImagePull and ImagePullBackOff (a registry outage or credentials that
//     arrive late clear within minutes; the kubelet keeps retrying), CreateContainerConfigError (the
//     missing Secret or ConfigMap may be created), CreateContainerError, a first crash or two, an
//     unschedulable pod (capacity frees up) and a node NotReady or cordoned (it may come back, or
//     the pod be replaced).
//
// A Ready container has no problem, whatever its last exit or restart count: that is history.
var terminalWaiting = []string{"InvalidImageName", "ErrImageNeverPull"}

// reportedWaiting are the container waiting reasons worth a line in `up`'s output.
var reportedWaiting = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"}

// ProblemsOf are the problems a pod's status shows, if any.
func ProblemsOf(p *corev1.Pod) []PodProblem {
	if p.DeletionTimestamp != nil {
		return nil
	}
	base := PodProblem{Pod: p.Name, Component: p.Labels[ComponentLabel], Node: p.Spec.NodeName}
	if p.Spec.NodeName == "" {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				u := base
				u.Reason, u.Message = c.Reason, c.Message
				return []PodProblem{u}
			}
		}
		return nil
	}
	var out []PodProblem
	for _, s := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if s.Ready {
			// Up now: an exit long ago (its last state, its restart count) is history.
			continue
		}
		c := base
		c.Container, c.Restarts = s.Name, s.RestartCount
		if t := s.LastTerminationState.Terminated; t != nil {
			c.LastReason, c.LastExitCode = t.Reason, t.ExitCode
		}
		switch {
		case s.State.Terminated != nil && s.State.Terminated.Reason == "OOMKilled":
			c.Reason, c.Message, c.Terminal = "OOMKilled", s.State.Terminated.Message, true
			c.LastReason, c.LastExitCode = "OOMKilled", s.State.Terminated.ExitCode
		case s.State.Waiting != nil && slices.Contains(reportedWaiting, s.State.Waiting.Reason):
			c.Reason, c.Message = s.State.Waiting.Reason, s.State.Waiting.Message
			c.Terminal = slices.Contains(terminalWaiting, c.Reason) ||
				c.Reason == "CrashLoopBackOff" && (c.Restarts >= CrashLoopTerminalRestarts || c.LastReason == "OOMKilled")
			if c.LastReason == "OOMKilled" {
				c.Reason = "OOMKilled"
			}
		case c.LastReason == "OOMKilled":
			// Starting again after an OOM kill, not Ready: it allocates the same.
			c.Reason, c.Terminal = "OOMKilled", true
		default:
			// Running or starting: a readiness probe that has not passed yet is what every
			// start looks like, so it is not reported.
			continue
		}
		out = append(out, c)
	}
	return out
}

// NodeProblemOf is what is wrong with a node for the pods on it: NodeNotReady (its Ready condition
// is not True: the kubelet stopped reporting, or reports a fault) or NodeCordoned (marked
// unschedulable: drained or about to be, for maintenance).
func NodeProblemOf(n *corev1.Node) (reason, message string, ok bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return "NodeNotReady", strings.TrimSpace(fmt.Sprintf("Ready is %s: %s %s", c.Status, c.Reason, c.Message)), true
		}
	}
	if n.Spec.Unschedulable {
		return "NodeCordoned", "cordoned (kubectl cordon or drain): no new pod lands there, and a drain evicts the ones it runs", true
	}
	return "", "", false
}

// outOfServiceTaints are the taints Kubernetes puts on a node out of service (cordoned, NotReady,
// unreachable): the condition itself, not a reason the pod could never go there.
var outOfServiceTaints = []string{corev1.TaintNodeUnschedulable, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}

// outOfServiceShown is how many out-of-service nodes an unschedulable pod's account names.
const outOfServiceShown = 5

// ComponentLabel is the label the Dynamo operator puts on every pod with its component's name.
const ComponentLabel = "nvidia.com/dynamo-component"

// WatchPodProblems calls report for each problem of a pod of the graph, and of the node under it,
// until ctx ends. A problem is reported once while it lasts; again when it changes (another reason,
// or it becomes terminal) or when it comes back after it cleared. A restart count that grows in the
// same crash loop is not a new problem. The nodes are watched only if the credential may list
// them; if not, report gets one problem saying so (Reason NodesUnread), and pods are still watched.
func (r *Reader) WatchPodProblems(ctx context.Context, namespace, graph string, report func(PodProblem)) error {
	type key struct {
		pod, container, node, reason, outOfService string
		terminal                                   bool
	}
	var (
		mu       sync.Mutex
		existing = map[string]bool{} // the pods there at the start
		seen     = map[key]bool{}
		podsOn   = map[string]map[string]string{}  // node → pod → component
		nodeOf   = map[string]string{}             // pod → node
		bad      = map[string][2]string{}          // node → reason, message
		badNode  = map[string]*corev1.Node{}       // node → the node, while it is bad
		waiting  = map[string]*corev1.Pod{}        // unschedulable pods
		starting = map[string]*corev1.Pod{}        // placed pods not yet running
		latest   = map[types.UID]startEvent{}      // pod → the kubelet's newest start event on it
		told     = map[types.UID]map[string]bool{} // pod → the start events reported while it starts
	)
	keyOf := func(p PodProblem) key {
		return key{p.Pod, p.Container, p.Node, p.Reason, p.OutOfService, p.Terminal}
	}
	// outOfService names the bad nodes an unschedulable pod could run on: its node selector and
	// required affinity match them, and it tolerates their taints (but those that say the node is
	// out of service). Another team's cordoned nodes, which the pod could never use, are not its
	// account; at most outOfServiceShown are named.
	outOfService := func(pod *corev1.Pod) string {
		var out []string
		affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
		for _, name := range slices.Sorted(maps.Keys(badNode)) {
			n := badNode[name]
			if ok, err := affinity.Match(n); err != nil || !ok {
				continue
			}
			if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
				return (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && !slices.Contains(outOfServiceTaints, t.Key)
			}, false); untolerated {
				continue
			}
			out = append(out, fmt.Sprintf("%s (%s)", name, bad[name][0]))
		}
		if len(out) > outOfServiceShown {
			out = append(out[:outOfServiceShown], fmt.Sprintf("and %d more", len(out)-outOfServiceShown))
		}
		return strings.Join(out, ", ")
	}
	// withNodes adds the out-of-service nodes to a pod's unschedulable problem.
	withNodes := func(pod *corev1.Pod, ps []PodProblem) []PodProblem {
		for i := range ps {
			if ps[i].Reason == corev1.PodReasonUnschedulable {
				ps[i].OutOfService = outOfService(pod)
			}
		}
		return ps
	}
	problemsOf := func(pod *corev1.Pod) []PodProblem { return withNodes(pod, ProblemsOf(pod)) }
	// tellEvent reports the kubelet's newest start event on a pod placed and not yet running, once
	// per reason and message while it starts (a kubelet repeats its event at each retry, and may
	// alternate two messages of one failure).
	tellEvent := func(pod *corev1.Pod) {
		e, ok := latest[pod.UID]
		if !ok || starting[pod.Name] != pod {
			return
		}
		k := e.problem.Reason + "\x00" + e.problem.Message
		if told[pod.UID][k] {
			return
		}
		if told[pod.UID] == nil {
			told[pod.UID] = map[string]bool{}
		}
		told[pod.UID][k] = true
		p := e.problem
		p.Pod, p.Component, p.Node, p.Existing = pod.Name, pod.Labels[ComponentLabel], pod.Spec.NodeName, existing[pod.Name]
		report(p)
	}
	// podProblems reports a pod's current problems and forgets those it no longer has.
	podProblems := func(pod string, now []PodProblem) {
		current := map[key]bool{}
		for _, p := range now {
			p.Existing = existing[p.Pod]
			k := keyOf(p)
			current[k] = true
			if !seen[k] {
				seen[k] = true
				report(p)
			}
		}
		gone := now == nil // the pod is deleted: its node's problems go with it
		for k := range seen {
			if k.pod == pod && !current[k] && (gone || !strings.HasPrefix(k.reason, "Node")) {
				delete(seen, k)
			}
		}
	}
	nodeProblems := func(node string) {
		problem, isBad := bad[node]
		for k := range seen {
			if k.node == node && strings.HasPrefix(k.reason, "Node") && (!isBad || k.reason != problem[0]) {
				delete(seen, k) // cleared, or changed: reported again if it comes back
			}
		}
		if !isBad {
			return
		}
		for _, pod := range slices.Sorted(maps.Keys(podsOn[node])) {
			p := PodProblem{Pod: pod, Component: podsOn[node][pod], Node: node, Reason: problem[0], Message: problem[1], Existing: existing[pod]}
			if k := keyOf(p); !seen[k] {
				seen[k] = true
				report(p)
			}
		}
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	// The pods are followed once the nodes' first listing is known, so that an unschedulable pod's
	// first line already names the trays out of service (not one line without them, then more).
	nodesKnown := make(chan struct{})
	var known sync.Once
	markKnown := func() { known.Do(func() { close(nodesKnown) }) }
	nodes := r.dynamic.Resource(nodesResource)
	if _, err := nodes.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		report(PodProblem{Reason: "NodesUnread", Message: "the nodes under the graph's pods are not followed: " + err.Error()})
		markKnown()
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer markKnown() // the watch failed before its listing: the pods go on without it
			listed := func(store cache.Store) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				for _, o := range store.List() {
					var n corev1.Node
					if u, ok := o.(*unstructured.Unstructured); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n) == nil {
						if reason, msg, isBad := NodeProblemOf(&n); isBad {
							bad[n.Name] = [2]string{reason, msg}
							badNode[n.Name] = &n
						}
					}
				}
				markKnown()
				return false, nil
			}
			_, _ = objwatch.Until(ctx, objwatch.All(nodes.List, nodes.Watch), &unstructured.Unstructured{}, listed, func(e watch.Event) (bool, error) {
				var n corev1.Node
				if !typed(e, &n) {
					return false, nil
				}
				mu.Lock()
				defer mu.Unlock()
				if reason, msg, isBad := NodeProblemOf(&n); isBad && e.Type != watch.Deleted {
					bad[n.Name] = [2]string{reason, msg}
					badNode[n.Name] = &n
				} else {
					delete(bad, n.Name)
					delete(badNode, n.Name)
				}
				nodeProblems(n.Name)
				// An unschedulable pod's account names the nodes out of service it could use.
				for _, name := range slices.Sorted(maps.Keys(waiting)) {
					podProblems(name, problemsOf(waiting[name]))
				}
				return false, nil
			})
		}()
	}
	select {
	case <-nodesKnown:
	case <-ctx.Done():
		return ctx.Err()
	}
	// The kubelet's events on the pods: what keeps a placed pod from starting before its containers
	// have a status (startEvents). Kept per pod (the newest), whether or not the pod is known yet:
	// the events may be listed before the pods. Only if the credential may list events.
	evs := r.dynamic.Resource(eventsResource).Namespace(namespace)
	if _, err := evs.List(ctx, metav1.ListOptions{Limit: 1, FieldSelector: startEventSelector.String()}); err != nil {
		report(PodProblem{Reason: "EventsUnread", Message: "the kubelet's events on the graph's pods are not followed: " + err.Error()})
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = objwatch.Until(ctx, objwatch.ByFields(startEventSelector, evs.List, evs.Watch), &unstructured.Unstructured{}, nil, func(e watch.Event) (bool, error) {
				var ev corev1.Event
				if e.Type == watch.Deleted || !typed(e, &ev) {
					return false, nil
				}
				p, ok := eventProblem(&ev)
				if !ok {
					return false, nil
				}
				at := eventTime(&ev)
				mu.Lock()
				cur, known := latest[ev.InvolvedObject.UID]
				mu.Unlock()
				if known && cur.at.After(at) {
					return false, nil // an older event, replayed by a relist
				}
				p = r.withIMEXState(ctx, namespace, p) // reads the cluster: outside the lock
				mu.Lock()
				defer mu.Unlock()
				if cur, known := latest[ev.InvolvedObject.UID]; known && cur.at.After(at) {
					return false, nil
				}
				if len(latest) >= maxStartEvents {
					for uid := range latest { // most are other graphs' pods, or gone
						delete(latest, uid)
						break
					}
				}
				latest[ev.InvolvedObject.UID] = startEvent{p, at}
				if pod := starting[ev.InvolvedObject.Name]; pod != nil && pod.UID == ev.InvolvedObject.UID {
					tellEvent(pod)
				}
				return false, nil
			})
		}()
	}
	pods := r.dynamic.Resource(podsResource).Namespace(namespace)
	// The first listing, before any event is handled: the pods there at the start.
	start := func(store cache.Store) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range store.List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				existing[u.GetName()] = true
			}
		}
		return false, nil
	}
	_, err := objwatch.Until(ctx, objwatch.ByLabel(GraphLabel+"="+graph, pods.List, pods.Watch), &unstructured.Unstructured{}, start, func(e watch.Event) (bool, error) {
		var p corev1.Pod
		if !typed(e, &p) {
			return false, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if old := nodeOf[p.Name]; old != "" {
			delete(podsOn[old], p.Name)
		}
		delete(nodeOf, p.Name)
		delete(waiting, p.Name)
		delete(starting, p.Name)
		if e.Type == watch.Deleted || p.DeletionTimestamp != nil {
			delete(latest, p.UID)
			delete(told, p.UID)
			podProblems(p.Name, nil)
			return false, nil
		}
		if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodPending {
			starting[p.Name] = &p
			tellEvent(&p)
		} else {
			delete(latest, p.UID)
			delete(told, p.UID)
		}
		ps := problemsOf(&p)
		if len(ps) == 1 && ps[0].Reason == corev1.PodReasonUnschedulable {
			waiting[p.Name] = &p
		}
		podProblems(p.Name, ps)
		if p.Spec.NodeName != "" {
			nodeOf[p.Name] = p.Spec.NodeName
			if podsOn[p.Spec.NodeName] == nil {
				podsOn[p.Spec.NodeName] = map[string]string{}
			}
			podsOn[p.Spec.NodeName][p.Name] = p.Labels[ComponentLabel]
			nodeProblems(p.Spec.NodeName)
		}
		return false, nil
	})
	return err
}

// typed reads a watch event's object into a typed one; false when it is not one.
func typed[T any](e watch.Event, into *T) bool {
	u, ok := e.Object.(*unstructured.Unstructured)
	return ok && runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into) == nil
}
