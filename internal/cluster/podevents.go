package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// notReadyInDomain is the DRA driver's kubelet plugin's error for a channel claim on a tray whose
// IMEX daemon is not Ready in the ComputeDomain (AssertComputeDomainReady).
const notReadyInDomain = "current node not ready in ComputeDomain"

// eventProblem is the problem a kubelet's event on a pod says, if it is one of startEvents.
func eventProblem(e *corev1.Event) (PodProblem, bool) {
	if e.InvolvedObject.Kind != "Pod" || e.Type != corev1.EventTypeWarning || !slices.Contains(startEvents, e.Reason) {
		return PodProblem{}, false
	}
	return PodProblem{Pod: e.InvolvedObject.Name, Node: e.Source.Host, Reason: e.Reason, Message: e.Message}, true
}

// imexState says, for a claim held by the IMEX daemon's readiness, what the ComputeDomains of the
// namespace say of the node: its daemon NotReady, or not there yet (not started: not placed, or its
// image not pulled). Any error reading them leaves the plugin's message as it is.
func (r *Reader) imexState(ctx context.Context, namespace, node string) string {
	list, err := r.dynamic.Resource(computeDomainsResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil || node == "" {
		return ""
	}
	for _, cd := range list.Items {
		nodes, _, _ := unstructured.NestedSlice(cd.Object, "status", "nodes")
		for _, n := range nodes {
			if m, ok := n.(map[string]any); ok && m["name"] == node {
				return fmt.Sprintf("the IMEX daemon on node %s is %v in ComputeDomain %s: the worker waits for it", node, m["status"], cd.GetName())
			}
		}
		if len(list.Items) == 1 {
			return fmt.Sprintf("ComputeDomain %s has no IMEX daemon on node %s yet (not started: not placed, or its image not pulled): the worker waits for it", cd.GetName(), node)
		}
	}
	return ""
}

// withIMEXState adds the IMEX daemon's state to a claim held for it.
func (r *Reader) withIMEXState(ctx context.Context, namespace string, p PodProblem) PodProblem {
	if p.Reason == "FailedPrepareDynamicResources" && strings.Contains(p.Message, notReadyInDomain) {
		if s := r.imexState(ctx, namespace, p.Node); s != "" {
			p.Message += " (" + s + ")"
		}
	}
	return p
}
