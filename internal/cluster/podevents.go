package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What keeps a placed pod from starting before any container has a status is only in the kubelet's
// events on the pod: its DRA claims not prepared (on a GB200 tray: the channel of the
// ComputeDomain, held until the tray's IMEX daemon is Ready), a volume not mounted, a sandbox not
// made. The kubelet retries each, and records the event again while it fails; none is terminal (the
// IMEX daemon may yet get Ready, the volume be reachable).
var startEvents = []string{"FailedPrepareDynamicResources", "FailedMount", "FailedAttachVolume", "FailedCreatePodSandBox"}

// startEventSelector selects the Warning events about pods.
var startEventSelector = fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", "Pod"), fields.OneTermEqualSelector("type", corev1.EventTypeWarning))

var (
	eventsResource         = corev1.SchemeGroupVersion.WithResource("events")
	computeDomainsResource = schema.GroupVersionResource{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomains"}
)

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

// imexState says what the ComputeDomains of the namespace say of a node whose pod's claims the
// kubelet cannot prepare: its IMEX daemon NotReady, or not there (not started: not placed, or its
// image not pulled). The DRA driver holds a channel claim until the tray's daemon is Ready in the
// domain, and the kubelet's event then says only that the plugin did not answer in time
// (NodePrepareResources: DeadlineExceeded, or skipped claims), so this is what names the wait.
// Nothing when the node is Ready in the domain (the cause is another), when no single domain is
// the pod's, or when the domains cannot be read.
func (r *Reader) imexState(ctx context.Context, namespace, node string) string {
	if node == "" {
		return ""
	}
	list, err := r.dynamic.Resource(computeDomainsResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, cd := range list.Items {
		nodes, _, _ := unstructured.NestedSlice(cd.Object, "status", "nodes")
		for _, n := range nodes {
			m, ok := n.(map[string]any)
			if !ok || m["name"] != node {
				continue
			}
			if m["status"] == "Ready" {
				return ""
			}
			return fmt.Sprintf("the IMEX daemon on node %s is %v in ComputeDomain %s: the worker's channel waits for it", node, m["status"], cd.GetName())
		}
	}
	if len(list.Items) == 1 {
		return fmt.Sprintf("ComputeDomain %s has no IMEX daemon on node %s yet (not started: not placed, or its image not pulled): the worker's channel waits for it",
			list.Items[0].GetName(), node)
	}
	return ""
}

// withIMEXState adds the IMEX daemon's state to a claim the kubelet cannot prepare.
func (r *Reader) withIMEXState(ctx context.Context, namespace string, p PodProblem) PodProblem {
	if p.Reason == "FailedPrepareDynamicResources" {
		if s := r.imexState(ctx, namespace, p.Node); s != "" {
			p.Message += " (" + s + ")"
		}
	}
	return p
}
