package cluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"minimax-m3/internal/objwatch"
)

// GraphFailure is what the Dynamo operator writes when it cannot bring a graph up: Ready False at
// the graph's generation, with status.state "failed", and its reason and message.
type GraphFailure struct {
	Generation      int64
	Reason, Message string
}

// GraphLabel is the label the Dynamo operator puts on every pod of a graph.
const GraphLabel = "nvidia.com/dynamo-graph-deployment-name"

// GraphResource is the DynamoGraphDeployment resource, in the version the stack writes.
var GraphResource = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1beta1", Resource: "dynamographdeployments"}

// GraphFailureOf is the failure a graph's status reports for its current generation, if any.
func GraphFailureOf(g *unstructured.Unstructured) (GraphFailure, bool) {
	state, _, _ := unstructured.NestedString(g.Object, "status", "state")
	if state != "failed" {
		return GraphFailure{}, false
	}
	conds, _, _ := unstructured.NestedSlice(g.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Ready" || m["status"] != "False" {
			continue
		}
		gen, _ := m["observedGeneration"].(int64)
		if gen != g.GetGeneration() {
			return GraphFailure{}, false
		}
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		return GraphFailure{Generation: gen, Reason: reason, Message: msg}, true
	}
	return GraphFailure{}, false
}

// The operator's choice of how it runs a graph: its own DynamoComponentDeployments ("component")
// or Grove's PodCliqueSets ("grove"). It writes the choice once, on the first reconcile, and it
// never changes; the program opts out of Grove (GroveOptOut) and reads the choice back.
const (
	WorkloadProviderAnnotation = "nvidia.com/workload-provider"
	WorkloadProviderComponent  = "component"
	// GroveOptOut is the annotation, with the value "false", that keeps a new graph off Grove.
	GroveOptOut = "nvidia.com/enable-grove"
)

// OtherProvider is a failure when the operator runs the graph through anything but its
// component path, whose rollout annotations and pod placement the program writes.
func OtherProvider(g *unstructured.Unstructured) (GraphFailure, bool) {
	p, ok := g.GetAnnotations()[WorkloadProviderAnnotation]
	if !ok || p == WorkloadProviderComponent {
		return GraphFailure{}, false
	}
	return GraphFailure{Generation: g.GetGeneration(), Reason: "WorkloadProvider", Message: ProviderMessage(g.GetNamespace(), g.GetName(), p)}, true
}

// ProviderMessage says why a graph the operator runs through another provider cannot be deployed
// by the program, and what to do.
func ProviderMessage(namespace, name, provider string) string {
	return fmt.Sprintf("the Dynamo operator runs DynamoGraphDeployment %s/%s through %q (%s, which it never changes), "+
		"not through its component path: that path ignores the rollout annotations and the placement this program writes. "+
		"Delete the graph (or set graphName to a new name) so that it is created again with %s: \"false\"",
		namespace, name, provider, WorkloadProviderAnnotation, GroveOptOut)
}

// GraphGeneration is the graph's metadata.generation; 0 when it does not exist.
func (r *Reader) GraphGeneration(ctx context.Context, namespace, name string) (int64, error) {
	obj, err := r.client.Resource(GraphResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return obj.Generation, nil
}

// WatchGraphFailures calls report for each failure the operator writes for a generation above
// after, until ctx ends.
func (r *Reader) WatchGraphFailures(ctx context.Context, namespace, name string, after int64, report func(GraphFailure)) error {
	graphs := r.dynamic.Resource(GraphResource).Namespace(namespace)
	lw := objwatch.ByName(name, graphs.List, graphs.Watch)
	var last GraphFailure
	providerSeen := false
	_, err := objwatch.Until(ctx, lw, &unstructured.Unstructured{}, nil, func(e watch.Event) (bool, error) {
		g, ok := e.Object.(*unstructured.Unstructured)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		if f, other := OtherProvider(g); other && !providerSeen {
			providerSeen = true
			report(f)
		}
		if f, failed := GraphFailureOf(g); failed && f.Generation > after && f != last {
			last = f
			report(f)
		}
		return false, nil
	})
	return err
}

// Condition is one of a graph's status conditions as the Dynamo operator writes it.
type Condition struct {
	Status, Reason, Message string
	// ObservedGeneration is the condition's own; 0 when it has none.
	ObservedGeneration int64
}

// ReadyCondition is the graph's Ready condition, if it has one.
func ReadyCondition(g *unstructured.Unstructured) (Condition, bool) {
	conds, _, _ := unstructured.NestedSlice(g.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Ready" {
			continue
		}
		var out Condition
		out.Status, _ = m["status"].(string)
		out.Reason, _ = m["reason"].(string)
		out.Message, _ = m["message"].(string)
		out.ObservedGeneration, _ = m["observedGeneration"].(int64)
		return out, true
	}
	return Condition{}, false
}

// ReadyAtGeneration says whether the operator reports the graph Ready at its generation: Ready True
// with the condition's observedGeneration, else status.observedGeneration, at metadata.generation.
// It is what the benchmark sweep waits for between points. (The provider's await for `up` also
// takes a Ready that carries neither generation.)
func ReadyAtGeneration(g *unstructured.Unstructured) bool {
	return ReadyFor(g, g.GetGeneration(), "")
}

// ReadyFor says whether the graph is Ready for what `up` wrote: Ready True observed at generation
// or above (the condition's observedGeneration, else status.observedGeneration), and with a
// restart ID, on the same observation, the operator's restart status at that ID and finished
// (Completed, or Superseded by a rollout that replaces every pod anyway). It is the condition of
// the provider's await (components.WaitFor), but a Ready carrying no generation is not taken.
func ReadyFor(g *unstructured.Unstructured, generation int64, restartID string) bool {
	c, ok := ReadyCondition(g)
	if !ok || c.Status != "True" {
		return false
	}
	gen := c.ObservedGeneration
	if gen == 0 {
		gen, _, _ = unstructured.NestedInt64(g.Object, "status", "observedGeneration")
	}
	if gen == 0 || gen < generation {
		return false
	}
	if restartID == "" {
		return true
	}
	status, _, _ := unstructured.NestedMap(g.Object, "status")
	for _, v := range status {
		m, _ := v.(map[string]any)
		if m["observedID"] == restartID && (m["phase"] == "Completed" || m["phase"] == "Superseded") {
			return true
		}
	}
	return false
}

// WaitGraphReady returns once the graph is Ready for generation and restartID (ReadyFor), or with
// ctx's error when ctx ends first. What it last saw of the graph is in seen, for messages.
func (r *Reader) WaitGraphReady(ctx context.Context, namespace, name string, generation int64, restartID string, seen *GraphSeen) error {
	graphs := r.dynamic.Resource(GraphResource).Namespace(namespace)
	_, err := objwatch.Until(ctx, objwatch.ByName(name, graphs.List, graphs.Watch), &unstructured.Unstructured{}, nil, func(e watch.Event) (bool, error) {
		g, ok := e.Object.(*unstructured.Unstructured)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		seen.Saw(g)
		return ReadyFor(g, generation, restartID), nil
	})
	return err
}

// Replicas are a component's replica counts as the operator reports them (status.components).
type Replicas struct{ Replicas, Updated, Ready int64 }

func (r Replicas) String() string {
	return fmt.Sprintf("%d of %d ready, %d updated", r.Ready, r.Replicas, r.Updated)
}

// ComponentsOf are the graph's components' replica counts, for those whose Ready count the
// operator reports (it leaves it out for a Grove scaling group).
func ComponentsOf(g *unstructured.Unstructured) map[string]Replicas {
	cs, _, _ := unstructured.NestedMap(g.Object, "status", "components")
	out := map[string]Replicas{}
	for name, c := range cs {
		m, _ := c.(map[string]any)
		if _, ok := m["readyReplicas"].(int64); !ok {
			continue
		}
		n := func(k string) int64 { v, _ := m[k].(int64); return v }
		out[name] = Replicas{Replicas: n("replicas"), Updated: n("updatedReplicas"), Ready: n("readyReplicas")}
	}
	return out
}

// GraphSeen is what a wait last saw of a graph: its Ready condition and its components' replica
// counts (read once the wait has returned). A nil GraphSeen keeps nothing.
type GraphSeen struct {
	Ready      Condition
	Components map[string]Replicas
}

// Saw records the graph as seen now.
func (s *GraphSeen) Saw(g *unstructured.Unstructured) {
	if s == nil {
		return
	}
	if c, ok := ReadyCondition(g); ok {
		s.Ready = c
	}
	s.Components = ComponentsOf(g)
}
