package cluster

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"minimax-m3/internal/objwatch"
)

// What keeps a graph's pods from being made at all is only in the events of the controller that
// makes them (a ReplicaSet, a StatefulSet, Grove's PodClique): FailedCreate, with the API server's
// refusal. No pod exists to watch, so without this a rollout whose pods an admission policy refuses
// would wait in silence.
var createEventSelector = fields.AndSelectors(fields.OneTermEqualSelector("reason", "FailedCreate"), fields.OneTermEqualSelector("type", corev1.EventTypeWarning))

// createRefusals are the API server's answers that refuse a pod for what it is: admission (Pod
// Security, a ValidatingAdmissionPolicy, a webhook) denies it again on every retry until the pod
// template or the policy changes. A quota exceeded, a ServiceAccount not there yet, may clear.
var createRefusals = []string{"violates PodSecurity", "ValidatingAdmissionPolicy", "denied the request", "denied request"}

// podNamePattern is the generated name of the pod a controller tried to make, which differs at each
// retry: left out, so that the same refusal reads the same.
var podNamePattern = regexp.MustCompile(`pods "[^"]*" `)

// podControllers are the kinds that make a graph's pods, as the Dynamo operator deploys it
// (Deployments' ReplicaSets, StatefulSets, Grove's PodCliques), by apiVersion and kind.
var podControllers = map[schema.GroupVersionKind]schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Kind: "ReplicaSet"}:                          {Group: "apps", Version: "v1", Resource: "replicasets"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"}:                         {Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "grove.io", Version: "v1alpha1", Kind: "PodClique"}:                 {Group: "grove.io", Version: "v1alpha1", Resource: "podcliques"},
	{Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet"}: {Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"},
}

// CreateProblem is the problem a controller's FailedCreate event says: no pod was made, and why
// (the pod's generated name left out). Terminal when admission refused the pod.
func CreateProblem(e *corev1.Event) (PodProblem, bool) {
	if e.Type != corev1.EventTypeWarning || e.Reason != "FailedCreate" {
		return PodProblem{}, false
	}
	message := podNamePattern.ReplaceAllString(e.Message, `pods "…" `)
	p := PodProblem{Reason: e.Reason, Message: fmt.Sprintf("%s %s makes no pod: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, message)}
	for _, r := range createRefusals {
		if strings.Contains(e.Message, r) {
			p.Terminal = true
		}
	}
	return p, true
}

// controllerOwner says whether a controller is the graph's: by the graph's label, which the
// Dynamo operator's pod templates carry and so their controllers (a ReplicaSet takes its
// template's labels); by name (<graph>-…) when the controller cannot be read.
type controllerOwner struct {
	r                *Reader
	namespace, graph string
	known            map[types.UID]bool
}

func (o *controllerOwner) ours(ctx context.Context, ref corev1.ObjectReference) bool {
	if ours, ok := o.known[ref.UID]; ok {
		return ours
	}
	ours := strings.HasPrefix(ref.Name, o.graph+"-")
	if gvr, ok := podControllers[schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)]; ok {
		if u, err := o.r.dynamic.Resource(gvr).Namespace(o.namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil && u.GetUID() == ref.UID {
			if g, labelled := u.GetLabels()[GraphLabel]; labelled {
				ours = g == o.graph
			}
		}
	}
	o.known[ref.UID] = ours
	return ours
}

// existingControllers are the graph's controllers there when the watch starts (nil when none
// could be listed): a refusal of theirs is an earlier rollout's, which the change being made may
// replace, so it is shown and left to the progress deadline, not terminal at once.
func (r *Reader) existingControllers(ctx context.Context, namespace, graph string) map[types.UID]bool {
	var out map[types.UID]bool
	selector := labels.SelectorFromSet(labels.Set{GraphLabel: graph}).String()
	for _, gvr := range podControllers {
		list, err := r.dynamic.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			continue // a kind the cluster does not serve, or may not be listed
		}
		if out == nil {
			out = map[types.UID]bool{}
		}
		for _, u := range list.Items {
			out[u.GetUID()] = true
		}
	}
	return out
}

// watchControllers feeds the tracker the FailedCreate events of the graph's controllers until ctx
// ends. A controller there at the start, or whose refusal is in the events' first listing when the
// controllers cannot be listed, is an existing one's (PodProblem.Existing).
func (r *Reader) watchControllers(ctx context.Context, namespace, graph string, feed func(func() []PodProblem), t *podTracker) {
	existing := r.existingControllers(ctx, namespace, graph)
	byListing := existing == nil
	if byListing {
		existing = map[types.UID]bool{}
	}
	owner := &controllerOwner{r: r, namespace: namespace, graph: graph, known: map[types.UID]bool{}}
	// The events' first listing, handed over before its events are: what was refused before the
	// watch began, when the controllers themselves could not be listed.
	listed := func(store cache.Store) (bool, error) {
		if byListing {
			for _, ev := range typedList[corev1.Event](store) {
				if _, ok := CreateProblem(&ev); ok {
					existing[ev.InvolvedObject.UID] = true
				}
			}
		}
		return false, nil
	}
	evs := r.dynamic.Resource(eventsResource).Namespace(namespace)
	_, _ = objwatch.Until(ctx, objwatch.ByFields(createEventSelector, evs.List, evs.Watch), &unstructured.Unstructured{}, listed, func(e watch.Event) (bool, error) {
		var ev corev1.Event
		if e.Type == watch.Deleted || !typed(e, &ev) {
			return false, nil
		}
		p, ok := CreateProblem(&ev)
		if !ok || !owner.ours(ctx, ev.InvolvedObject) {
			return false, nil
		}
		p.Existing = existing[ev.InvolvedObject.UID]
		now := time.Now()
		feed(func() []PodProblem { return t.controller(ev.InvolvedObject.UID, p, now) })
		return false, nil
	})
}
