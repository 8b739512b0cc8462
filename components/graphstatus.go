package components

import (
	"context"
	"fmt"
	"minimax-m3/internal/cluster"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
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
	WatchPodProblems(ctx context.Context, namespace, graph string, report func(cluster.PodProblem)) error
}

// reportGraphFailures shows, while `up` waits for the graph, each failure the Dynamo operator
// reports for the generation this `up` writes, and each problem of the graph's pods and their
// nodes (cluster.PodProblem), as a warning on the graph's component: its reason and message are in
// the output as Kubernetes reports them, and in `up`'s error when the wait ends. The provider's
// wait itself cannot end early on a failure (it ends at readiness.timeout), nor say why.
func reportGraphFailures(ctx *pulumi.Context, w GraphStatusWatcher, g *Graph, dgd pulumi.Resource, namespace, name, timeout string) {
	rctx, cancel := context.WithCancel(context.Background())
	before, err := w.GraphGeneration(rctx, namespace, name)
	if err != nil {
		cancel()
		_ = ctx.Log.Warn("not following the Dynamo operator's status of the graph: "+err.Error(), &pulumi.LogArgs{Resource: g})
		return
	}
	go func() {
		_ = w.WatchGraphFailures(rctx, namespace, name, before, func(f cluster.GraphFailure) {
			_ = ctx.Log.Warn(fmt.Sprintf("the Dynamo operator reports DynamoGraphDeployment %s/%s failed at generation %d: %s: %s "+
				"(up waits for Ready until readiness.timeout, %s, in case it recovers: Ctrl-C stops waiting)", namespace, name, f.Generation, f.Reason, f.Message, timeout),
				&pulumi.LogArgs{Resource: g})
		})
	}()
	go func() {
		_ = w.WatchPodProblems(rctx, namespace, name, func(p cluster.PodProblem) {
			_ = ctx.Log.Warn(PodProblemMessage(namespace, name, p, timeout), &pulumi.LogArgs{Resource: g})
		})
	}()
	// The graph's registration returns once the provider's wait ended, either way.
	dgd.URN().ApplyT(func(string) string { cancel(); return "" })
}

// PodProblemMessage is how `up` shows a problem of one of the graph's pods: Kubernetes' reason with
// the pod, node and container, and whether waiting can still help.
func PodProblemMessage(namespace, graph string, p cluster.PodProblem, timeout string) string {
	what := "up waits for Ready until readiness.timeout, " + timeout + ", in case it clears: Ctrl-C stops waiting"
	switch {
	case p.Terminal:
		what = "this does not clear without a change (docs/day-two.md#troubleshooting); up still waits until readiness.timeout, " + timeout + ": Ctrl-C stops waiting"
	case p.Reason == "Unschedulable":
		what = "up waits for Ready until readiness.timeout, " + timeout + ", in case capacity frees up: Ctrl-C stops waiting"
	}
	return fmt.Sprintf("DynamoGraphDeployment %s/%s: %s (%s)", namespace, graph, p, what)
}
