package cluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The chain a GB200 worker's ComputeDomain channel waits on, on its tray (the NVIDIA DRA driver:
// cmd/compute-domain-kubelet-plugin, cmd/compute-domain-controller, cmd/compute-domain-daemon):
// the kubelet plugin labels the tray with the domain (ComputeDomainLabel), the domain's IMEX
// DaemonSet places a daemon there, the daemon gets Ready and enters the tray in the domain's
// status.nodes, and only then does the plugin prepare the worker's claim. The kubelet's event on
// the worker (FailedPrepareDynamicResources) says only that the plugin ran out of time, so the
// watch names the chain's stages from what the cluster says of each.

var computeDomainsResource = schema.GroupVersionResource{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomains"}

// ComputeDomainLabel labels a tray (and the IMEX DaemonSet's pods) with the UID of the
// ComputeDomain whose channel a pod on the tray holds.
const ComputeDomainLabel = "resource.nvidia.com/computeDomain"

// IMEXChain is what the cluster says of each stage of a ComputeDomain's chain on one tray.
type IMEXChain struct {
	Domain, Node string
	// Daemons are the domain's IMEX daemon pods on the node (nil: none); DaemonsErr is why they
	// could not be read (the driver's namespace is often not the team's to read).
	Daemons    []corev1.Pod
	DaemonsErr error
	// NodeStatus is the node's status in the domain's status.nodes ("": not there).
	NodeStatus string
}

// String names the chain stage by stage, up to the first that is not through: "" when the node
// is Ready in the domain (the claim's wait is not the chain's).
func (c IMEXChain) String() string {
	if c.NodeStatus == "Ready" {
		return ""
	}
	var stages []string
	switch {
	case c.DaemonsErr != nil:
		stages = append(stages, fmt.Sprintf("its IMEX daemon pod: cannot be read (%v)", c.DaemonsErr))
	case len(c.Daemons) == 0:
		stages = append(stages, fmt.Sprintf("no IMEX daemon pod on the node (the domain's DaemonSet places one on a tray labelled %s once the kubelet plugin "+
			"labels it: the label, the DaemonSet's pods and the driver's kubelet plugin)", ComputeDomainLabel))
	default:
		stages = append(stages, daemonStage(&c.Daemons[0]))
	}
	if c.NodeStatus == "" {
		stages = append(stages, "the node is not in the domain's status.nodes (a daemon enters it once it runs)")
	} else {
		stages = append(stages, fmt.Sprintf("the node is %s in the domain's status.nodes (Ready once its daemon is)", c.NodeStatus))
	}
	stages = append(stages, "so the worker's channel claim is not prepared")
	return fmt.Sprintf("IMEX chain of ComputeDomain %s on node %s: %s", c.Domain, c.Node, strings.Join(stages, " → "))
}

// daemonStage says how far an IMEX daemon pod is: placed, started, Ready.
func daemonStage(p *corev1.Pod) string {
	name := p.Namespace + "/" + p.Name
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && w.Reason != "" {
			out := fmt.Sprintf("IMEX daemon pod %s is %s, container %s: %s", name, p.Status.Phase, s.Name, w.Reason)
			// A crash loop's message is its back-off, which grows at each restart: not news.
			if w.Message != "" && w.Reason != "CrashLoopBackOff" {
				out += ": " + w.Message
			}
			return out
		}
		if t := s.State.Terminated; t != nil {
			return fmt.Sprintf("IMEX daemon pod %s: container %s exited (%s, code %d)", name, s.Name, t.Reason, t.ExitCode)
		}
	}
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Sprintf("IMEX daemon pod %s is %s", name, p.Status.Phase)
	}
	if podReady(p) {
		return fmt.Sprintf("IMEX daemon pod %s is Ready", name)
	}
	return fmt.Sprintf("IMEX daemon pod %s runs but is not Ready (IMEX has not joined its peers: the daemon's log)", name)
}

// imexChain reads the chain of the namespace's ComputeDomain on node: nil when the node is Ready in
// every domain of the namespace, when the namespace's domains cannot be read, or when the node is
// in none of several domains (which one is the pod's is not known).
func (r *Reader) imexChain(ctx context.Context, namespace, node string) *IMEXChain {
	if node == "" {
		return nil
	}
	list, err := r.dynamic.Resource(computeDomainsResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return nil
	}
	var domain *unstructured.Unstructured
	status := ""
	for i := range list.Items {
		nodes, _, _ := unstructured.NestedSlice(list.Items[i].Object, "status", "nodes")
		for _, n := range nodes {
			if m, ok := n.(map[string]any); ok && m["name"] == node {
				if m["status"] == "Ready" {
					return nil
				}
				domain, status = &list.Items[i], fmt.Sprint(m["status"])
			}
		}
	}
	if domain == nil {
		if len(list.Items) > 1 {
			return nil
		}
		domain = &list.Items[0]
	}
	chain := &IMEXChain{Domain: domain.GetName(), Node: node, NodeStatus: status}
	if domain.GetUID() == "" {
		return chain
	}
	pods, err := r.dynamic.Resource(podsResource).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{ComputeDomainLabel: string(domain.GetUID())}).String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		chain.DaemonsErr = err
		return chain
	}
	for i := range pods.Items {
		var p corev1.Pod
		err := runtime.DefaultUnstructuredConverter.FromUnstructured(pods.Items[i].Object, &p)
		if err == nil && p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			chain.Daemons = append(chain.Daemons, p)
		}
	}
	return chain
}

// withIMEXState adds the IMEX chain's stages to a claim the kubelet cannot prepare.
func (r *Reader) withIMEXState(ctx context.Context, namespace string, p PodProblem) PodProblem {
	if p.Reason == "FailedPrepareDynamicResources" {
		if c := r.imexChain(ctx, namespace, p.Node); c != nil {
			if s := c.String(); s != "" {
				p.Message += " (" + s + ")"
			}
		}
	}
	return p
}
