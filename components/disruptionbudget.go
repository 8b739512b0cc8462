package components

import (
	"strings"

	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	policyv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/policy/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/internal/cluster"
	"minimax-m3/manifest"
)

// newDisruptionBudgets adds a PodDisruptionBudget per worker role (placement.disruptionBudget): a
// node drain (kubectl drain, a node pool upgrade) evicts at most one worker of a role at a time and
// waits for its replacement to be Ready before the next. On a full clique the replacement of an
// evicted worker cannot be placed, and the drain then stops at the second worker instead of taking
// the role down. The operator's own rollouts delete pods, which a budget does not hold back.
func newDisruptionBudgets(ctx *pulumi.Context, component string, g *Graph, args *GraphArgs) error {
	c := args.Config
	if !c.Placement.DisruptionBudget {
		return nil
	}
	for _, r := range c.Workers() {
		name := manifest.DisruptionBudgetName(c, r)
		if _, err := policyv1.NewPodDisruptionBudget(ctx, graphChild(component, "disruption-budget-"+strings.ToLower(r.Name), args.Index), &policyv1.PodDisruptionBudgetArgs{
			Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(name), Namespace: args.Namespace, Labels: stackLabels(ctx),
				// A budget holds from the moment it exists; its status is the disruption
				// controller's count, which nothing here waits for.
				Annotations: args.Meta.annotations(ctx, "PodDisruptionBudget", name, pulumi.StringMap{"pulumi.com/skipAwait": pulumi.String("true")})},
			Spec: &policyv1.PodDisruptionBudgetSpecArgs{
				MaxUnavailable: pulumi.Int(1),
				// A worker that crash-loops is not Ready: it must not keep a drain from evicting
				// the healthy ones (the default counts it as the one unavailable).
				UnhealthyPodEvictionPolicy: pulumi.String("AlwaysAllow"),
				Selector: &metav1.LabelSelectorArgs{MatchLabels: pulumi.StringMap{
					cluster.GraphLabel:      pulumi.String(c.GraphName),
					manifest.ComponentLabel: pulumi.String(r.Name),
				}},
			},
		}, pulumi.Parent(g)); err != nil {
			return err
		}
	}
	return nil
}
