package cluster

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"minimax-m3/internal/objwatch"
)

// WatchPodProblems calls report from several goroutines, one call at a time at most per watch
// (pods, nodes, events, the deadline); report must be safe for concurrent use.

// ComponentLabel is the label the Dynamo operator puts on every pod with its component's name.
const ComponentLabel = "nvidia.com/dynamo-component"

// WatchPodProblems calls report for each problem of a pod of the graph (every component: frontend,
// workers, the endpoint picker), of the node under it and of the kubelet's events on it, until ctx
// ends. A problem is reported once while it lasts; again when it changes (another reason, or it
// becomes terminal) or when it comes back after it cleared. A restart count that grows in the same
// crash loop is not a new problem. With a deadline, when no pod of the graph came further
// (created, scheduled, every container started, Ready, or taken away) for that long while problems
// persisted, report gets one terminal problem naming them (ProgressDeadlineExceeded). The nodes
// and events are watched only if the credential may list them; if not, report gets one problem
// saying so (Reason NodesUnread, EventsUnread), and pods are still watched. The state is a
// podTracker's; this is the loop that feeds it.
func (r *Reader) WatchPodProblems(ctx context.Context, namespace, graph string, deadline time.Duration, report func(PodProblem)) error {
	var mu sync.Mutex
	t := newPodTracker(deadline, time.Now())
	// feed runs one of the tracker's methods under the lock and reports what it returns.
	feed := func(f func() []PodProblem) {
		mu.Lock()
		ps := f()
		mu.Unlock()
		for _, p := range ps {
			report(p)
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
				feed(func() []PodProblem { t.listedNodes(typedList[corev1.Node](store)); return nil })
				markKnown()
				return false, nil
			}
			_, _ = objwatch.Until(ctx, objwatch.All(nodes.List, nodes.Watch), &unstructured.Unstructured{}, listed, func(e watch.Event) (bool, error) {
				var n corev1.Node
				if typed(e, &n) {
					feed(func() []PodProblem { return t.node(&n, e.Type == watch.Deleted, time.Now()) })
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
	// have a status, a pull the registry refused, a probe that fails. Only if the credential may
	// list events.
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
				replayed := t.replayed(ev.InvolvedObject.UID, at)
				mu.Unlock()
				if replayed {
					return false, nil
				}
				p = r.withIMEXState(ctx, namespace, p) // reads the cluster: outside the lock
				feed(func() []PodProblem { return t.event(ev.InvolvedObject.UID, p, at) })
				return false, nil
			})
		}()
	}
	// The events of the controllers that make the graph's pods: a pod the API server refuses is
	// never there to watch (controllers.go). Only if the credential may list events.
	if _, err := evs.List(ctx, metav1.ListOptions{Limit: 1, FieldSelector: createEventSelector.String()}); err == nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.watchControllers(ctx, namespace, graph, feed, t)
		}()
	}
	if deadline > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(min(deadline/10+time.Millisecond, 10*time.Second))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-tick.C:
					feed(func() []PodProblem { return t.expire(now) })
				}
			}
		}()
	}
	pods := r.dynamic.Resource(podsResource).Namespace(namespace)
	// The first listing, before any event is handled: the pods there at the start.
	start := func(store cache.Store) (bool, error) {
		feed(func() []PodProblem { t.listedPods(typedList[corev1.Pod](store)); return nil })
		return false, nil
	}
	_, err := objwatch.Until(ctx, objwatch.ByLabel(GraphLabel+"="+graph, pods.List, pods.Watch), &unstructured.Unstructured{}, start, func(e watch.Event) (bool, error) {
		var p corev1.Pod
		if typed(e, &p) {
			feed(func() []PodProblem { return t.pod(&p, e.Type == watch.Deleted, time.Now()) })
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

// typedList is a store's objects read as T, those that read.
func typedList[T any](store cache.Store) []T {
	var out []T
	for _, o := range store.List() {
		var v T
		if u, ok := o.(*unstructured.Unstructured); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v) == nil {
			out = append(out, v)
		}
	}
	return out
}
