package cluster

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// What keeps a placed pod from starting before any container has a status is only in the kubelet's
// events on the pod: its DRA claims not prepared (on a GB200 tray: the channel of the
// ComputeDomain, held until the tray's IMEX daemon is Ready), a volume not mounted, a sandbox not
// made. The kubelet retries each, and records the event again while it fails; none is terminal (the
// IMEX daemon may yet get Ready, the volume be reachable).
var startEvents = []string{"FailedPrepareDynamicResources", "FailedMount", "FailedAttachVolume", "FailedCreatePodSandBox"}

// startEventSelector selects the Warning events about pods.
var startEventSelector = fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", "Pod"), fields.OneTermEqualSelector("type", corev1.EventTypeWarning))

var eventsResource = corev1.SchemeGroupVersion.WithResource("events")

// startEvent is the kubelet's newest event on a pod, when it was last seen, and when the same
// failure was first seen.
type startEvent struct {
	problem   PodProblem
	at, first time.Time
}

// maxStartEvents bounds the start events kept for pods not (yet) seen as the graph's.
const maxStartEvents = 1000

// eventTime is when an event was last seen to happen.
func eventTime(e *corev1.Event) time.Time {
	at := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(at) {
		at = e.Series.LastObservedTime.Time
	}
	for _, t := range []time.Time{e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if at.IsZero() {
			at = t
		}
	}
	return at
}

// eventProblem is the problem a kubelet's Warning event on a pod says, if it says one: one of
// startEvents; a pull the registry refused or that failed (Failed: "Failed to pull image …", as
// ErrImagePull, terminal when PullTerminal says so); a readiness or liveness probe failing
// (Unhealthy). The node is the kubelet's (the event's source host).
func eventProblem(e *corev1.Event) (PodProblem, bool) {
	if e.InvolvedObject.Kind != "Pod" || e.Type != corev1.EventTypeWarning {
		return PodProblem{}, false
	}
	p := PodProblem{Pod: e.InvolvedObject.Name, Node: e.Source.Host, Reason: e.Reason, Message: e.Message}
	switch {
	case slices.Contains(startEvents, e.Reason):
	case probeFailure(e.Reason, e.Message):
		p.Container = containerOf(e.InvolvedObject.FieldPath)
	case e.Reason == "Failed" && strings.HasPrefix(e.Message, "Failed to pull image"):
		p.Reason, p.Container = "ErrImagePull", containerOf(e.InvolvedObject.FieldPath)
		p.Terminal = PullTerminal(p.Reason, p.Message)
	default:
		return PodProblem{}, false
	}
	return p, true
}

// containerOf is the container an event's field path names ("spec.containers{main}": main).
func containerOf(fieldPath string) string {
	_, rest, ok := strings.Cut(fieldPath, "{")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "}")
	return name
}
