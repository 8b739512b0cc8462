package cluster

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The pure checkers of a pod's, a node's or an event's state: each says what problem, if any, that
// state is, with no I/O; podTracker feeds them what the watches see (pods.go).

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
	// FailedCreatePodSandBox), or on a container that runs and is not Ready (Unhealthy: its
	// readiness or liveness probe fails); ProgressDeadlineExceeded when no pod of the graph made
	// progress for the deadline while others of these persisted; NodesUnread or EventsUnread (no
	// pod) when the credential may not list nodes or events.
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
//   - ErrImagePull and ImagePullBackOff when the registry answered that the image's tag or
//     repository does not exist, or refused the credentials (PullTerminal: the kubelet's message
//     says so);
//   - not terminal: ErrImagePull and ImagePullBackOff otherwise (a registry that times out, an
//     outage, credentials that arrive late clear within minutes; the kubelet keeps retrying; the
//     progress deadline ends the wait if it lasts), CreateContainerConfigError (the
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
			c.Terminal = slices.Contains(terminalWaiting, c.Reason) || PullTerminal(c.Reason, c.Message) ||
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

// PullTerminal reports whether an image pull failure (ErrImagePull, ImagePullBackOff, or the
// kubelet's Failed event) is the registry's answer that the image cannot be pulled as named: the
// tag or repository does not exist, or access to it is denied. It reads the registry's own words as
// containerd and CRI-O pass them on (manifest unknown, repository does not exist, requested access
// to the resource is denied, pull access denied), or a not-found or refused authorization while
// resolving the reference; a timeout, a reset connection, a 5xx or the node's own errors (a local
// content store's "not found", a permission on the node) are none of these.
func PullTerminal(reason, message string) bool {
	if reason != "ErrImagePull" && reason != "ImagePullBackOff" {
		return false
	}
	m := strings.ToLower(message)
	for _, a := range []string{"manifest unknown", "repository does not exist", "requested access to the resource is denied", "pull access denied", "name unknown"} {
		if strings.Contains(m, a) {
			return true
		}
	}
	_, resolving, ok := strings.Cut(m, "failed to resolve reference")
	if !ok {
		return false
	}
	for _, a := range []string{": not found", "401 unauthorized", "403 forbidden", "failed to authorize"} {
		if strings.Contains(resolving, a) {
			return true
		}
	}
	return false
}

// probeFailure is the kubelet's Unhealthy event on a container whose readiness or liveness probe
// fails (a startup probe failing is what a loading engine looks like, bounded by the probe's own
// threshold: not a problem).
func probeFailure(reason, message string) bool {
	return reason == "Unhealthy" && (strings.HasPrefix(message, "Readiness probe failed") || strings.HasPrefix(message, "Liveness probe failed"))
}

// podStage is how far a pod has come: created, scheduled, every container started, Ready. A pod's
// highest stage growing is progress (a crash loop's restarts are not).
func podStage(p *corev1.Pod) int {
	switch {
	case p.Spec.NodeName == "":
		return 0
	case podReady(p):
		return 3
	case len(p.Status.ContainerStatuses) > 0 && !slices.ContainsFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.State.Running == nil }):
		return 2
	}
	return 1
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
