package rackbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The chain a GB200 worker waits on before it starts, played per tray where it needs hardware (the
// NVIDIA DRA driver's kubelet plugin needs NVML, its IMEX daemon an NVLink fabric), in the order a
// real tray goes through it (dra-driver-nvidia-gpu: cmd/compute-domain-kubelet-plugin's
// device_state.go and computedomain.go, cmd/compute-domain-daemon's cdclique.go):
//
//  1. The scheduler (real) allocates the worker's ComputeDomain channel on a tray and binds it.
//  2. The kubelet plugin (played) labels the tray resource.nvidia.com/computeDomain=<domain UID>
//     and holds the worker's claim until the tray is Ready in the ComputeDomain.
//  3. The compute-domain-controller's IMEX DaemonSet (real) selects the tray by that label; the
//     scheduler places its daemon and allocates the daemon's claim, which the plugin prepares at
//     once, so kwok starts the daemon's pod.
//  4. The daemon (played) enters the tray in its clique's ComputeDomainClique, Ready once its pod
//     is Ready, as the real daemon does from its pod's readiness probe.
//  5. The controller (real) copies the clique into the ComputeDomain's status.nodes.
//  6. The plugin's check passes: the claim is prepared (ClaimsPreparedAnnotation) and kwok starts
//     the worker (claimGated).
//
// While step 6 fails, the kubelet records FailedPrepareDynamicResources on the pod every
// prepareRetry: a real plugin retries such an error for 45 s (ErrorRetryMaxTimeout), as long as the
// kubelet's call may take, so the event says only that the call ran out of time (a permanent error
// is the plugin's own text); the box waits 10 s, more than its chain takes on a healthy tray. When
// no pod on the tray holds a channel of the domain any more, the plugin removes the label, so the
// daemon goes. A tray annotated with IMEXTroubleAnnotation has a daemon in that trouble
// (TroubleNeverReady: it runs but IMEX never gets Ready; TroubleImagePull: its image cannot be
// pulled), and its workers wait.
const (
	// ClaimsPreparedAnnotation is set to "true" on a pod once the box's kubelet plugin has prepared
	// all its DRA claims; only then do kwok's stages start a pod that has claims.
	ClaimsPreparedAnnotation = "rackbox.minimax-m3.io/claims-prepared"
	// IMEXTroubleAnnotation on a tray makes the IMEX daemons placed on it play that trouble.
	IMEXTroubleAnnotation = "rackbox.minimax-m3.io/imex-trouble"
	// ComputeDomainLabel is the label the kubelet plugin puts on a tray for the ComputeDomain (its
	// UID) whose channel a pod on the tray holds; the IMEX DaemonSet selects trays by it.
	ComputeDomainLabel = "resource.nvidia.com/computeDomain"
	cliqueIDLabel      = "resource.nvidia.com/computeDomain.cliqueID"
	prepareRetry       = 10 * time.Second
	// DaemonServiceAccount is the IMEX daemons' service account, which the driver's chart creates.
	DaemonServiceAccount = "compute-domain-daemon-service-account"
)

var computeDomainCliqueGVK = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomainClique"}

// podNodeField indexes the pods in the player's cache by the node they are bound to.
const podNodeField = "spec.nodeName"

// trays plays the kubelet plugin and the IMEX daemon of every tray.
type trays struct {
	c      client.Client
	events record.EventBroadcaster
	scheme *runtime.Scheme
	mu     sync.Mutex
	since  map[types.UID]time.Time // when a pod's preparation last began to fail
}

// startTrays adds the tray player to the box's manager.
func startTrays(ctx context.Context, mgr manager.Manager, events record.EventBroadcaster) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podNodeField, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return err
	}
	t := &trays{c: mgr.GetClient(), events: events, scheme: mgr.GetScheme(), since: map[types.UID]time.Time{}}
	domains := &unstructured.Unstructured{}
	domains.SetGroupVersionKind(ComputeDomainGVK)
	return builder.ControllerManagedBy(mgr).Named("rackbox-trays").For(&corev1.Node{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: n}}}
			}
			return nil
		})).
		Watches(domains, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			// A domain's status changed: the trays labelled for it may now be Ready in it.
			var nodes corev1.NodeList
			if err := t.c.List(ctx, &nodes, client.MatchingLabels{ComputeDomainLabel: string(o.GetUID())}); err != nil {
				return nil
			}
			var out []reconcile.Request
			for _, n := range nodes.Items {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: n.Name}})
			}
			return out
		})).
		Complete(t)
}

// claimConfig is the compute-domain driver's opaque config of an allocated claim.
type claimConfig struct {
	Kind     string `json:"kind"`
	DomainID string `json:"domainID"`
}

// Reconcile plays one tray's kubelet plugin and IMEX daemon.
func (t *trays) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var node corev1.Node
	if err := t.c.Get(ctx, req.NamespacedName, &node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var pods corev1.PodList
	if err := t.c.List(ctx, &pods, client.MatchingFields{podNodeField: node.Name}); err != nil {
		return reconcile.Result{}, err
	}
	var result reconcile.Result
	later := func(d time.Duration) {
		if result.RequeueAfter == 0 || d < result.RequeueAfter {
			result.RequeueAfter = d
		}
	}
	held := map[string]bool{} // the domains whose channel a pod on the tray holds
	type pending struct {
		pod      *corev1.Pod
		channels []string
	}
	var toPrepare []pending
	incomplete := false
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || len(p.Spec.ResourceClaims) == 0 {
			continue
		}
		configs, complete, err := t.configsOf(ctx, p)
		if err != nil {
			return reconcile.Result{}, err
		}
		var channels []string
		for _, c := range configs {
			if c.Kind == "ComputeDomainChannelConfig" {
				channels = append(channels, c.DomainID)
				held[c.DomainID] = true
			}
		}
		if p.DeletionTimestamp != nil {
			t.mu.Lock()
			delete(t.since, p.UID)
			t.mu.Unlock()
		}
		switch {
		case p.DeletionTimestamp != nil || p.Annotations[ClaimsPreparedAnnotation] == "true":
		case !complete:
			incomplete = true
			later(500 * time.Millisecond) // the claims are not all allocated yet
		default:
			toPrepare = append(toPrepare, pending{p, channels})
		}
	}
	if err := t.label(ctx, &node, held, incomplete); err != nil {
		return reconcile.Result{}, err
	}
	for _, w := range toPrepare {
		failure, err := t.channelsReady(ctx, &node, w.channels)
		if err != nil {
			return reconcile.Result{}, err
		}
		if failure == "" {
			if err := t.prepared(ctx, &node, w.pod); err != nil {
				return reconcile.Result{}, err
			}
			continue
		}
		later(t.failed(ctx, node.Name, w.pod, failure))
	}
	// The IMEX daemons of each domain on the tray: the one running, if any.
	daemons := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !isDaemon(p) {
			continue
		}
		uid := p.Labels[ComputeDomainLabel]
		if _, ok := daemons[uid]; !ok {
			daemons[uid] = nil
		}
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			daemons[uid] = p
		}
	}
	for uid, p := range daemons {
		if err := t.daemon(ctx, &node, uid, p); err != nil {
			return reconcile.Result{}, err
		}
	}
	return result, nil
}

// configsOf reads the compute-domain configs of a pod's allocated claims; complete is false while
// a claim is not made or not allocated yet.
func (t *trays) configsOf(ctx context.Context, p *corev1.Pod) (configs []claimConfig, complete bool, err error) {
	for _, pc := range p.Spec.ResourceClaims {
		name := pc.ResourceClaimName
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.Name == pc.Name && s.ResourceClaimName != nil {
				name = s.ResourceClaimName
			}
		}
		if name == nil {
			return nil, false, nil
		}
		var claim resourcev1.ResourceClaim
		if err := t.c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: *name}, &claim); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, false, nil
			}
			return nil, false, err
		}
		if claim.Status.Allocation == nil {
			return nil, false, nil
		}
		for _, c := range claim.Status.Allocation.Devices.Config {
			if c.Opaque == nil || c.Opaque.Driver != ComputeDomainDriver {
				continue
			}
			var cc claimConfig
			if err := json.Unmarshal(c.Opaque.Parameters.Raw, &cc); err != nil {
				return nil, false, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
			}
			configs = append(configs, cc)
		}
	}
	return configs, true, nil
}

// label keeps the tray's ComputeDomain label on the domain a pod on it holds a channel of, and
// takes it off once none does (the plugin's AddNodeLabel and RemoveNodeLabel). A second domain on
// the same tray is refused at preparation (channelsReady), as the plugin refuses it.
func (t *trays) label(ctx context.Context, node *corev1.Node, held map[string]bool, incomplete bool) error {
	current, labelled := node.Labels[ComputeDomainLabel]
	var want string // "": no label
	switch {
	case labelled && held[current]:
		return nil
	case len(held) > 0:
		want = slices.Sorted(maps.Keys(held))[0]
	case !labelled || incomplete:
		return nil // nothing to take off, or a claim not read yet may hold it
	}
	patch := client.MergeFrom(node.DeepCopy())
	if want == "" {
		delete(node.Labels, ComputeDomainLabel)
	} else {
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[ComputeDomainLabel] = want
	}
	return client.IgnoreNotFound(t.c.Patch(ctx, node, patch))
}

// channelsReady is the plugin's check before it prepares a channel: the tray is labelled for the
// domain and Ready in its status (AssertComputeDomainReady). It returns the plugin's error, or "".
func (t *trays) channelsReady(ctx context.Context, node *corev1.Node, domains []string) (string, error) {
	for _, uid := range domains {
		if node.Labels[ComputeDomainLabel] != uid {
			return "error adding Node label for ComputeDomain: label already exists for a different ComputeDomain", nil
		}
		var cds unstructured.UnstructuredList
		cds.SetGroupVersionKind(ComputeDomainGVK)
		if err := t.c.List(ctx, &cds); err != nil {
			return "", err
		}
		ready := false
		found := false
		for _, cd := range cds.Items {
			if string(cd.GetUID()) != uid {
				continue
			}
			found = true
			nodes, _, _ := unstructured.NestedSlice(cd.Object, "status", "nodes")
			for _, n := range nodes {
				if m, ok := n.(map[string]any); ok && m["name"] == node.Name && m["status"] == "Ready" {
					ready = true
				}
			}
		}
		if !found {
			return permanentFailure + ": error getting ComputeDomain: ComputeDomain not found: " + uid, nil
		}
		if !ready {
			return "error asserting ComputeDomain Ready: current node not ready in ComputeDomain", nil
		}
	}
	return "", nil
}

// prepared marks a pod's claims prepared; an IMEX daemon on a troubled tray gets its trouble with
// it, so kwok never starts it well.
func (t *trays) prepared(ctx context.Context, node *corev1.Node, p *corev1.Pod) error {
	t.mu.Lock()
	delete(t.since, p.UID)
	t.mu.Unlock()
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[ClaimsPreparedAnnotation] = "true"
	if trouble := node.Annotations[IMEXTroubleAnnotation]; trouble != "" && isDaemon(p) {
		p.Annotations[TroubleAnnotation] = trouble
	}
	return client.IgnoreNotFound(t.c.Patch(ctx, p, patch))
}

// failed records a preparation that fails the way the kubelet does, once per prepareRetry (the
// event's count grows), and says when to look again. The plugin retries what may clear (a tray not
// Ready in the domain, its label held by another domain) until the kubelet's call runs out of time,
// so that event says only that; a permanent error (the domain not found) is the plugin's own text.
func (t *trays) failed(ctx context.Context, node string, p *corev1.Pod, failure string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	since, ok := t.since[p.UID]
	if !ok {
		t.since[p.UID] = time.Now()
		return prepareRetry
	}
	if wait := prepareRetry - time.Since(since); wait > 0 {
		return wait
	}
	t.since[p.UID] = time.Now()
	message := "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources: rpc error: code = DeadlineExceeded desc = context deadline exceeded"
	if strings.HasPrefix(failure, permanentFailure) {
		var claim resourcev1.ResourceClaim
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				_ = t.c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: *s.ResourceClaimName}, &claim)
			}
		}
		message = fmt.Sprintf("Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim %s: "+
			"error preparing devices for claim '%s/%s:%s': prepare devices failed: error applying config: %s", claim.Name, claim.Namespace, claim.Name, claim.UID, failure)
	}
	// As the tray's kubelet records it.
	t.events.NewRecorder(t.scheme, corev1.EventSource{Component: "kubelet", Host: node}).Event(p, corev1.EventTypeWarning, "FailedPrepareDynamicResources", message)
	return prepareRetry
}

// permanentFailure starts the plugin's error that it does not retry.
const permanentFailure = "error asserting ComputeDomain's namespace"

// isDaemon tells an IMEX daemon's pod (the controller's DaemonSet, in the driver's namespace).
func isDaemon(p *corev1.Pod) bool {
	return p.Namespace == DriverNamespace && p.Labels[ComputeDomainLabel] != ""
}

// daemon plays the IMEX daemon of domain uid on a tray (running: its pod, nil when none runs): the
// tray in the clique's ComputeDomainClique (<domain UID>.<clique id>, in the driver's namespace),
// with the pod's IP, Ready as its pod is; when no daemon runs (it stopped, or its replacement has
// not started), the tray's entry goes, as the real daemon removes it when it stops.
func (t *trays) daemon(ctx context.Context, node *corev1.Node, uid string, running *corev1.Pod) error {
	clique := node.Labels[CliqueLabel]
	if clique == "" {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(computeDomainCliqueGVK)
	key := client.ObjectKey{Namespace: DriverNamespace, Name: uid + "." + clique}
	err := t.c.Get(ctx, key, u)
	if apierrors.IsNotFound(err) && running == nil {
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	daemons, _, _ := unstructured.NestedSlice(u.Object, "daemons")
	mine := slices.IndexFunc(daemons, func(d any) bool { m, _ := d.(map[string]any); return m["nodeName"] == node.Name })
	if running == nil {
		if mine < 0 {
			return nil
		}
		u.Object["daemons"] = slices.Delete(daemons, mine, mine+1)
		return client.IgnoreNotFound(t.c.Update(ctx, u))
	}
	status := "NotReady"
	for _, c := range running.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			status = "Ready"
		}
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: running.Name, UID: running.UID}
	entry := map[string]any{"nodeName": node.Name, "ipAddress": running.Status.PodIP, "cliqueID": clique, "status": status}
	if apierrors.IsNotFound(err) {
		u.SetName(key.Name)
		u.SetNamespace(key.Namespace)
		u.SetLabels(map[string]string{ComputeDomainLabel: uid, cliqueIDLabel: clique})
		u.SetOwnerReferences([]metav1.OwnerReference{owner})
		entry["index"] = int64(0)
		u.Object["daemons"] = []any{entry}
		return client.IgnoreAlreadyExists(t.c.Create(ctx, u))
	}
	changed := false
	if mine < 0 {
		used := map[int64]bool{}
		for _, d := range daemons {
			m, _ := d.(map[string]any)
			if idx, ok := m["index"].(int64); ok {
				used[idx] = true
			}
		}
		var next int64
		for used[next] {
			next++
		}
		entry["index"] = next
		daemons = append(daemons, entry)
		changed = true
	} else if m := daemons[mine].(map[string]any); m["ipAddress"] != entry["ipAddress"] || m["status"] != status {
		m["ipAddress"], m["status"] = entry["ipAddress"], status
		changed = true
	}
	owners := u.GetOwnerReferences()
	if !slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return o.UID == running.UID }) {
		u.SetOwnerReferences(append(owners, owner))
		changed = true
	}
	if !changed {
		return nil
	}
	u.Object["daemons"] = daemons
	return t.c.Update(ctx, u)
}
