package benchmark

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// LeaseName is the Lease a running sweep holds in its namespace: one sweep per namespace at a
// time, since sweeps there share the model cache claim and, on one stack, the graph they restart.
const LeaseName = "minimax-m3-benchmark"

// RunLabel carries a sweep's run ID on everything it creates (the helper pod, the Jobs) and on its
// Lease.
const RunLabel = "minimax-m3.io/benchmark-run"

// Lease timing: a sweep renews its Lease every leaseRenew; a Lease not renewed for leaseDuration
// (its sweep was killed) may be taken by the next sweep.
const (
	leaseDuration = 90 * time.Second
	leaseRenew    = 20 * time.Second
)

// BusyError is a sweep refused because another one holds the namespace's Lease.
type BusyError struct {
	Namespace, RunID, Graph string
	Renewed                 time.Time
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("sweep %s (graph %s) is running in namespace %s: its Lease %s was renewed %s ago; wait for it, or interrupt it (its Lease is released at once, or expires %s after its last renewal)",
		e.RunID, e.Graph, e.Namespace, LeaseName, time.Since(e.Renewed).Round(time.Second), leaseDuration)
}

// runLease is the Lease a sweep holds while it runs.
type runLease struct {
	kube             kubernetes.Interface
	namespace, runID string
	cancel           context.CancelFunc
	done             chan struct{}
}

// acquireLease takes the namespace's benchmark Lease for runID: created when absent, taken over
// when its holder stopped renewing it, refused (BusyError) while another run holds it. The Lease
// is renewed until release; a Lease another run took meanwhile (after this one failed to renew it
// for its whole duration) is reported through lost.
func acquireLease(ctx context.Context, kube kubernetes.Interface, namespace, runID, graph string, lost func(error)) (*runLease, error) {
	leases := kube.CoordinationV1().Leases(namespace)
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(leaseDuration / time.Second)
	spec := coordinationv1.LeaseSpec{HolderIdentity: &runID, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now}
	meta := metav1.ObjectMeta{Name: LeaseName, Namespace: namespace,
		Labels: map[string]string{"app.kubernetes.io/component": "benchmark", "app.kubernetes.io/part-of": "minimax-m3", RunLabel: runID, "minimax-m3.io/graph": graph}}
	old, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: meta, Spec: spec}, metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return acquireLease(ctx, kube, namespace, runID, graph, lost)
			}
			return nil, fmt.Errorf("taking the benchmark Lease %s/%s: %w", namespace, LeaseName, err)
		}
	case err != nil:
		return nil, fmt.Errorf("reading the benchmark Lease %s/%s: %w", namespace, LeaseName, err)
	default:
		if busy := heldByOther(old, runID); busy != nil {
			busy.Namespace = namespace
			return nil, busy
		}
		old.Labels, old.Spec = meta.Labels, spec
		// The resourceVersion read above makes this a compare-and-swap: a sweep that took the
		// Lease meanwhile wins, and this one is refused.
		if _, err := leases.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				return acquireLease(ctx, kube, namespace, runID, graph, lost)
			}
			return nil, fmt.Errorf("taking the benchmark Lease %s/%s: %w", namespace, LeaseName, err)
		}
	}
	renewCtx, cancel := context.WithCancel(context.Background())
	l := &runLease{kube: kube, namespace: namespace, runID: runID, cancel: cancel, done: make(chan struct{})}
	go l.renew(renewCtx, lost)
	return l, nil
}

// heldByOther is the Lease's holder when it is another run that renewed it within its duration.
func heldByOther(l *coordinationv1.Lease, runID string) *BusyError {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" || holder == runID || l.Spec.RenewTime == nil {
		return nil
	}
	duration := leaseDuration
	if l.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if time.Since(l.Spec.RenewTime.Time) > duration {
		return nil
	}
	return &BusyError{RunID: holder, Graph: l.Labels["minimax-m3.io/graph"], Renewed: l.Spec.RenewTime.Time}
}

func (l *runLease) renew(ctx context.Context, lost func(error)) {
	defer close(l.done)
	tick := time.NewTicker(leaseRenew)
	defer tick.Stop()
	leases := l.kube.CoordinationV1().Leases(l.namespace)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		if err != nil {
			continue // a transient error: the next tick retries well within the Lease's duration
		}
		if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != l.runID {
			holder := "nobody"
			if cur.Spec.HolderIdentity != nil {
				holder = "run " + *cur.Spec.HolderIdentity
			}
			if lost != nil {
				lost(fmt.Errorf("the benchmark Lease %s/%s is held by %s now (this sweep could not renew it in time)", l.namespace, LeaseName, holder))
			}
			return
		}
		now := metav1.NewMicroTime(time.Now())
		cur.Spec.RenewTime = &now
		_, _ = leases.Update(ctx, cur, metav1.UpdateOptions{}) // a conflict or error: the next tick retries
	}
}

// release stops renewing and deletes the Lease if this run still holds it, even when the sweep's
// context is done (an interrupt).
func (l *runLease) release() {
	l.cancel()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases := l.kube.CoordinationV1().Leases(l.namespace)
	// A transient error or a conflict is tried again, the Lease read anew (client-go's default
	// backoff, within the 10 s): a Lease left behind would hold the namespace's next sweep until it
	// expires. Gone, or another run's, is done.
	_ = retry.OnError(retry.DefaultBackoff, func(err error) bool {
		return ctx.Err() == nil && !apierrors.IsNotFound(err)
	}, func() error {
		cur, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != l.runID {
			return nil
		}
		return leases.Delete(ctx, LeaseName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cur.ResourceVersion}})
	})
}
