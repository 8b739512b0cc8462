package benchmark

import (
	"context"
	"fmt"
	"slices"
	"time"

	"minimax-m3/internal/cluster"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// How a sweep restarts the graph between points.
const (
	// RestartPods is the recipe's restart (perf/README.md): every pod of the graph deleted at once,
	// so their Deployments start every replacement together: one round of cold starts, needing no
	// spare GPU. The default.
	RestartPods = "pods"
	// RestartSpec restarts through the graph's spec.restart (restart.id, with restart.strategy
	// Parallel, then `up`): every component at once, each rolled by the operator within its
	// rollout's bounds (one worker at a time by default).
	RestartSpec = "spec"
)

// graphPodLabel is the label the Dynamo operator puts on every pod of a graph.
const graphPodLabel = "nvidia.com/dynamo-graph-deployment-name"

// RestartPods deletes every pod of the graph, as `kubectl delete pods -l
// nvidia.com/dynamo-graph-deployment-name=<graph>` does, and waits until as many pods as before,
// none of them a deleted one, are Ready and the operator reports the graph Ready at its
// generation. readiness.timeout bounds the wait: one round of cold starts. What keeps a
// replacement from running is reported through beat as it is seen (with a Dynamic client, the
// nodes too: cluster.Reader.WatchPodProblems; else cluster.ProblemsOf), and a terminal problem (a crash loop, an OOM kill, an image that cannot exist) ends the wait at once.
func (s *Sweep) RestartPods(ctx context.Context, beat func(string)) error {
	timeout, _ := time.ParseDuration(s.Config.Readiness.Timeout) // validated
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pods := s.Kube.CoreV1().Pods(s.Namespace)
	selector := metav1.ListOptions{LabelSelector: graphPodLabel + "=" + s.Config.GraphName}
	list, err := pods.List(ctx, selector)
	if err != nil {
		return err
	}
	old, oldNames := map[types.UID]bool{}, map[string]bool{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			old[p.UID] = true
		}
		oldNames[p.Name] = true
	}
	if len(old) == 0 {
		return fmt.Errorf("graph %s has no pods to restart", s.Config.GraphName)
	}
	// What keeps a replacement from running, nodes included (a tray NotReady or cordoned under it,
	// or out of service where it could go), as `up` follows it.
	// The pods' own status is read on every round as well: a terminal problem ends the wait even
	// where the credential may not watch. A line is shown once, from whichever saw it first.
	watched := make(chan cluster.PodProblem, 64)
	if s.Dynamic != nil {
		go func() {
			_ = cluster.NewFromClients(nil, s.Dynamic).WatchPodProblems(ctx, s.Namespace, s.Config.GraphName, s.Config.Readiness.ProgressDeadlineDuration(), func(p cluster.PodProblem) {
				select {
				case watched <- p:
				default: // not read (the wait for the graph, after the pods): dropped, never blocking the watch
				}
			})
		}()
	}
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, selector); err != nil {
		return fmt.Errorf("deleting the pods of graph %s: %w", s.Config.GraphName, err)
	}
	beat(fmt.Sprintf("deleted the graph's %d pods; waiting for their replacements to be Ready", len(old)))
	shown := map[string]bool{}
	// oldGoneAt: when no old pod was left. Until then the replacements' want of room is the
	// restart's own (the old pods still hold their GPUs while they terminate), not worth a line; nor
	// is it for the scheduler's next try after that (a pending pod waits out its back-off, at most
	// 10 s by default, before the freed GPUs are seen): only a replacement still unschedulable after
	// that lacks room someone else took.
	var oldGoneAt time.Time
	show := func(problem cluster.PodProblem) error {
		if problem.Terminal {
			return fmt.Errorf("the graph's pods did not come back: %s (this does not clear without a change)", problem)
		}
		if problem.Reason == corev1.PodReasonUnschedulable && (oldGoneAt.IsZero() || time.Since(oldGoneAt) < schedulerRetry) {
			return nil
		}
		if line := problem.String(); !shown[line] {
			shown[line] = true
			beat(line)
		}
		return nil
	}
	for {
		list, err := pods.List(ctx, selector)
		if err == nil && restarted(list.Items, old) {
			break
		}
		if err == nil {
			if gone := !slices.ContainsFunc(list.Items, func(p corev1.Pod) bool { return old[p.UID] }); gone && oldGoneAt.IsZero() {
				oldGoneAt = time.Now()
			}
			// What keeps a replacement from running, from its status. A terminal problem ends the
			// wait (cluster.PodProblem's Terminal: it does not clear without a change).
			for _, p := range list.Items {
				if old[p.UID] {
					continue
				}
				for _, problem := range cluster.ProblemsOf(&p) {
					if err := show(problem); err != nil {
						return err
					}
				}
			}
		}
		next := time.After(2 * time.Second)
	wait:
		for {
			select {
			case <-ctx.Done():
				return fmt.Errorf("the graph's pods were not all replaced and Ready within readiness.timeout (%s): %w", timeout, ctx.Err())
			case problem := <-watched:
				if oldNames[problem.Pod] {
					continue // an old pod, going (a replacement has a name of its own)
				}
				if err := show(problem); err != nil {
					return err
				}
			case <-next:
				break wait
			}
		}
	}
	return s.waitReady(ctx)
}

// schedulerRetry is how long after the old pods are gone a replacement's Unschedulable still is the
// restart's own: kube-scheduler's longest back-off for a pending pod (podMaxBackoffSeconds, 10 s by
// default) and a margin.
const schedulerRetry = 15 * time.Second

// restarted reports whether none of the old pods remain and as many new ones are Ready.
func restarted(pods []corev1.Pod, old map[types.UID]bool) bool {
	ready := 0
	for _, p := range pods {
		if old[p.UID] {
			return false
		}
		if p.DeletionTimestamp == nil && podReady(p) {
			ready++
		}
	}
	return ready >= len(old)
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// describePods counts the graph's pods as a restart waits for them.
func (s *Sweep) describePods(ctx context.Context) string {
	list, err := s.Kube.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: graphPodLabel + "=" + s.Config.GraphName})
	if err != nil {
		return ""
	}
	ready, terminating := 0, 0
	for _, p := range list.Items {
		switch {
		case p.DeletionTimestamp != nil:
			terminating++
		case podReady(p):
			ready++
		}
	}
	return fmt.Sprintf("graph pods: %d Ready, %d starting, %d terminating", ready, len(list.Items)-ready-terminating, terminating)
}

// waitReady waits until the operator reports the graph Ready at its generation.
func (s *Sweep) waitReady(ctx context.Context) error {
	graphs := s.Dynamic.Resource(cluster.GraphResource).Namespace(s.Namespace)
	for {
		g, err := graphs.Get(ctx, s.Config.GraphName, metav1.GetOptions{})
		if err == nil && cluster.ReadyAtGeneration(g) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("graph %s not Ready: %w", s.Config.GraphName, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}
