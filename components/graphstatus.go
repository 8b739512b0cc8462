package components

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/internal/cluster"
)

// GraphStatusWatcher follows a graph's status while `up` waits for it.
type GraphStatusWatcher interface {
	// GraphGeneration is the graph's metadata.generation; 0 when it does not exist.
	GraphGeneration(ctx context.Context, namespace, name string) (int64, error)
	// WatchGraphFailures calls report for each failure the operator writes for a generation above
	// after, until ctx ends.
	WatchGraphFailures(ctx context.Context, namespace, name string, after int64, report func(cluster.GraphFailure)) error
	// WatchPodProblems calls report for each new problem of a pod of the graph, or of the node
	// under it, with Kubernetes' reason, until ctx ends.
	// With a deadline, one terminal problem says when no pod came further for that long while
	// problems persisted.
	WatchPodProblems(ctx context.Context, namespace, graph string, deadline time.Duration, report func(cluster.PodProblem)) error
	// WaitGraphReady returns once the graph is Ready for generation and restartID
	// (cluster.ReadyFor), or with ctx's error; what it last saw of the graph is in seen.
	WaitGraphReady(ctx context.Context, namespace, name string, generation int64, restartID string, seen *cluster.GraphSeen) error
}

// The cluster's reader is the watcher `up` uses (components.Deploy finds it by this interface).
var _ GraphStatusWatcher = (*cluster.Reader)(nil)

// graphWait is what `up` waits for after writing the graph: Ready for what it wrote, within the
// create's or the update's budget.
type graphWait struct {
	namespace, name, restartID string
	// timeout is readiness.timeout as written, for messages; create and update are the budgets.
	timeout        string
	create, update time.Duration
	// readyBefore is the generation an earlier up saw Ready (GraphArgs.ReadyBefore).
	readyBefore int64
	// progressDeadline is readiness.progressDeadline.
	progressDeadline time.Duration
}

// followGraph waits for the graph in place of the provider (the graph carries
// pulumi.com/skipAwait): the returned output resolves to the graph once the operator reports it
// Ready for the generation `up` wrote, and fails `up` at once on a terminal problem of a pod made
// after `up` started (cluster.PodProblem.Terminal: it does not clear without a change; a pod from
// before, which the rollout may replace, only shows), or at the end of the budget with the
// operator's last Ready condition and the problems seen, instead of the provider's bare "timed
// out". Like the provider, it waits only when this up creates or changes the graph, or when no
// earlier up saw the graph Ready at the generation it leaves. While it waits, each failure the
// Dynamo operator reports for a generation this `up` writes, and each problem of the graph's pods
// and their nodes, is a warning on the graph's component, with Kubernetes' reason and message. The
// watches end with the wait, or with the program's run (a cancelled `up`).
func followGraph(ctx *pulumi.Context, w GraphStatusWatcher, g *Graph, dgd *apiextensions.CustomResource, wait *graphWait) (pulumi.ResourceArrayOutput, pulumi.IntOutput) {
	rctx, cancel := context.WithCancel(ctx.Context())
	ns, name := wait.namespace, wait.name
	before, err := w.GraphGeneration(rctx, ns, name)
	budget := wait.update
	switch {
	case err != nil:
		_ = ctx.Log.Warn("cannot tell whether the graph exists, so up waits for it as long as for an update: "+err.Error(), &pulumi.LogArgs{Resource: g})
	case before == 0:
		budget = wait.create
	}
	go func() {
		_ = w.WatchGraphFailures(rctx, ns, name, before, func(f cluster.GraphFailure) {
			_ = ctx.Log.Warn(fmt.Sprintf("the Dynamo operator reports DynamoGraphDeployment %s/%s failed at generation %d: %s: %s "+
				"(up waits for Ready until readiness.timeout, %s, in case it recovers: Ctrl-C stops waiting)", ns, name, f.Generation, f.Reason, f.Message, wait.timeout),
				&pulumi.LogArgs{Resource: g})
		})
	}()
	seen := &problemLog{terminal: make(chan cluster.PodProblem, 1)}
	go func() {
		_ = w.WatchPodProblems(rctx, ns, name, 0, func(p cluster.PodProblem) {
			_ = ctx.Log.Warn(PodProblemMessage(ns, name, p, wait.timeout), &pulumi.LogArgs{Resource: g})
			seen.add(p)
		})
	}()
	type result struct {
		ready      []pulumi.Resource
		generation int
	}
	done := dgd.Metadata.Generation().ApplyT(func(gen *int) (result, error) {
		defer cancel()
		written := 0
		if gen != nil {
			written = *gen
		}
		if written > 0 && int64(written) == before && int64(written) <= wait.readyBefore {
			// This up left the graph as an earlier one saw it Ready: nothing to wait for.
			return result{[]pulumi.Resource{dgd}, written}, nil
		}
		_ = ctx.Log.Info(fmt.Sprintf("waiting for DynamoGraphDeployment %s/%s to be Ready at generation %d (at most %s)", ns, name, written, budget), &pulumi.LogArgs{Resource: g})
		if err := wait.untilReady(rctx, w, int64(written), budget, seen); err != nil {
			_ = ctx.Log.Error(err.Error(), &pulumi.LogArgs{Resource: dgd})
			return result{}, shown{err}
		}
		return result{[]pulumi.Resource{dgd}, written}, nil
	})
	return done.ApplyT(func(r any) []pulumi.Resource { return r.(result).ready }).(pulumi.ResourceArrayOutput),
		done.ApplyT(func(r any) int { return r.(result).generation }).(pulumi.IntOutput)
}

// untilReady waits for the graph to be Ready for generation, ending early on a terminal problem. At
// the end of its budget it names the components short of their replicas: a rollout standing at
// part capacity (the warnings of their pods say why, where Kubernetes knows).
func (w *graphWait) untilReady(ctx context.Context, watcher GraphStatusWatcher, generation int64, budget time.Duration, seen *problemLog) error {
	wctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var (
		graph    cluster.GraphSeen
		terminal *cluster.PodProblem
	)
	stopped := make(chan struct{})
	if w.progressDeadline > 0 {
		// The progress deadline runs from the wait's start (the graph is written; the download
		// before it may take hours): a watch of its own, whose deadline problem alone is taken.
		go func() {
			_ = watcher.WatchPodProblems(wctx, w.namespace, w.name, w.progressDeadline, func(p cluster.PodProblem) {
				if p.Reason == "ProgressDeadlineExceeded" {
					seen.add(p)
				}
			})
		}()
	}
	go func() {
		select {
		case p := <-seen.terminal:
			terminal = &p
			cancel()
		case <-wctx.Done():
		}
		close(stopped)
	}()
	err := watcher.WaitGraphReady(wctx, w.namespace, w.name, generation, w.restartID, &graph)
	cancel()
	<-stopped
	last := graph.Ready
	switch {
	case terminal != nil && terminal.Reason == "ProgressDeadlineExceeded":
		return fmt.Errorf("DynamoGraphDeployment %s/%s made no progress: %s (docs/day-two.md#troubleshooting); up stopped waiting instead of running into readiness.timeout, %s",
			w.namespace, w.name, terminal.Message, w.timeout)
	case terminal != nil:
		return fmt.Errorf("DynamoGraphDeployment %s/%s cannot become Ready without a change: %s "+
			"(docs/day-two.md#troubleshooting); up stopped waiting instead of running into readiness.timeout, %s",
			w.namespace, w.name, terminal, w.timeout)
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("DynamoGraphDeployment %s/%s was not Ready at generation %d within %s (readiness.timeout, %s",
			w.namespace, w.name, generation, budget, w.timeout)
		if budget != w.create {
			msg += ", for each round of the rollout"
		}
		msg += ")"
		if last.Status != "" {
			msg += fmt.Sprintf("; the operator's Ready condition: %s, %s: %s", last.Status, last.Reason, last.Message)
		}
		if short := shortComponents(graph.Components); short != "" {
			msg += "; its components: " + short
		}
		if ps := seen.recent(); len(ps) > 0 {
			msg += "; what kept its pods from running: " + strings.Join(ps, "; ")
		}
		return errors.New(msg)
	default:
		return fmt.Errorf("DynamoGraphDeployment %s/%s: waiting for Ready: %w", w.namespace, w.name, err)
	}
}

// shortComponents names the components with fewer Ready than their replicas, and their counts.
func shortComponents(cs map[string]cluster.Replicas) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(cs)) {
		if r := cs[name]; r.Ready < r.Replicas {
			out = append(out, name+" "+r.String())
		}
	}
	return strings.Join(out, ", ")
}

// problemLog keeps the problems of the graph's pods reported during the wait, and hands the first
// terminal one of a pod made after the watch started to the wait.
type problemLog struct {
	mu       sync.Mutex
	all      []string
	terminal chan cluster.PodProblem
}

func (l *problemLog) add(p cluster.PodProblem) {
	l.mu.Lock()
	l.all = append(l.all, p.String())
	l.mu.Unlock()
	if p.Terminal && !p.Existing {
		select {
		case l.terminal <- p:
		default:
		}
	}
}

// recent is the last few problems, for a timeout's message.
func (l *problemLog) recent() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.all[max(0, len(l.all)-5):]...)
}

// PodProblemMessage is how `up` shows a problem of one of the graph's pods: Kubernetes' reason with
// the pod, node and container, and whether waiting can still help.
func PodProblemMessage(namespace, graph string, p cluster.PodProblem, timeout string) string {
	what := "up waits for Ready until readiness.timeout, " + timeout + ", in case it clears: Ctrl-C stops waiting"
	switch {
	case p.Terminal:
		what = "this does not clear without a change: docs/day-two.md#troubleshooting"
	case p.Reason == "Unschedulable":
		what = "up waits for Ready until readiness.timeout, " + timeout + ", in case capacity frees up: Ctrl-C stops waiting"
	}
	return fmt.Sprintf("DynamoGraphDeployment %s/%s: %s (%s)", namespace, graph, p, what)
}
