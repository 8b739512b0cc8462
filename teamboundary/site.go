package teamboundary

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	yamlv2 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/yaml/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// SiteArgs is what a site hands to its teams.
type SiteArgs struct {
	// Teams maps each team (its group at the API server) to the namespaces it gets.
	Teams map[string][]string
	// WorkerRuntimeClass is the GPU workers' RuntimeClass, which the API server's Pod Security
	// configuration exempts (PodSecurityAdmissionConfiguration).
	WorkerRuntimeClass string
	// PriorityClasses are the priority classes the teams' pods may name.
	PriorityClasses []string
	// Portal is the portal's identity at the API server (a User, or a ServiceAccount with its
	// namespace), which may impersonate the teams; nil grants no one.
	Portal *rbacv1.Subject
	// Workspaces is the namespace of the Pulumi Kubernetes Operator's Stacks (pko.Runner's): each
	// team gets a ServiceAccount there (WorkspaceServiceAccount), bound as the team's group is, for
	// its workspace pods to run as. Empty: none.
	Workspaces string
}

// Site is the site's install for teams sharing a fleet: the admission policies and their bindings,
// the teams' namespaces (Pod Security baseline enforced), their roles and bindings.
type Site struct {
	pulumi.ResourceState
	// PodPolicy and GraphPolicy name the admission policies (and their bindings).
	PodPolicy   pulumi.StringOutput `pulumi:"podPolicy"`
	GraphPolicy pulumi.StringOutput `pulumi:"graphPolicy"`
	// Namespaces are the team namespaces, sorted.
	Namespaces pulumi.StringArrayOutput `pulumi:"namespaces"`
}

// SiteToken is the Site component's type token.
const SiteToken = "minimax-m3:index:Site"

// Objects are the site's objects, in the order they are applied.
func Objects(a SiteArgs) ([]any, error) {
	if len(a.Teams) == 0 {
		return nil, fmt.Errorf("teams: name at least one team and its namespaces")
	}
	if a.WorkerRuntimeClass == "" {
		return nil, fmt.Errorf("workerRuntimeClass: name the GPU workers' RuntimeClass the API server exempts from Pod Security")
	}
	teams := slices.Sorted(maps.Keys(a.Teams))
	for _, team := range teams {
		// The team's name is a label value (TeamLabel) and a group at the API server.
		if errs := validation.IsValidLabelValue(team); len(errs) > 0 || team == "" {
			return nil, fmt.Errorf("teams.%s: a team's name is a label value on its namespaces (letters, digits, '-', '_', '.'): %s", team, strings.Join(errs, "; "))
		}
	}
	// Each team's workspace ServiceAccount, when the site runs the operator's workspaces.
	var accounts []any
	var workspaces []rbacv1.Subject
	if a.Workspaces != "" {
		if errs := validation.IsDNS1123Label(a.Workspaces); len(errs) > 0 {
			return nil, fmt.Errorf("workspaces: %q is not a namespace name: %s", a.Workspaces, strings.Join(errs, "; "))
		}
		if strings.HasPrefix(a.Workspaces, "kube-") {
			return nil, fmt.Errorf("workspaces: %q is one of Kubernetes' own namespaces", a.Workspaces)
		}
		for _, team := range teams {
			// A team's role there would reach every team's token Secrets and workspace pods.
			if slices.Contains(a.Teams[team], a.Workspaces) {
				return nil, fmt.Errorf("workspaces: namespace %s is team %s's: the operator's namespace holds every team's Stacks and tokens, and belongs to no team", a.Workspaces, team)
			}
		}
		for _, team := range teams {
			if errs := validation.IsDNS1123Subdomain(WorkspaceServiceAccount(team)); len(errs) > 0 {
				return nil, fmt.Errorf("teams.%s: the workspace ServiceAccount %q is not a valid name: %s", team, WorkspaceServiceAccount(team), strings.Join(errs, "; "))
			}
			if a.Portal != nil && a.Portal.Kind == rbacv1.ServiceAccountKind && a.Portal.Namespace == a.Workspaces && a.Portal.Name == WorkspaceServiceAccount(team) {
				return nil, fmt.Errorf("teams.%s: the workspace ServiceAccount %s/%s is the portal's identity", team, a.Workspaces, a.Portal.Name)
			}
			accounts = append(accounts, serviceAccount(team, a.Workspaces))
			workspaces = append(workspaces, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: WorkspaceServiceAccount(team), Namespace: a.Workspaces})
		}
	}
	objs := []any{PodPolicy(a.PriorityClasses, a.WorkerRuntimeClass), PodPolicyBinding(), GraphPolicy(), GraphPolicyBinding(),
		TeamClusterRole(), FleetReaderClusterRole(), ClusterBinding(FleetReaderRole, append(Groups(teams...), workspaces...)...)}
	if a.Portal != nil {
		objs = append(objs, ImpersonatorClusterRole(teams), ClusterBinding(ImpersonatorRole, *a.Portal))
	}
	if len(workspaces) > 0 {
		// The operator's requirement of a workspace's account: checking who calls its pod.
		delegator := ClusterBinding("system:auth-delegator", workspaces...)
		delegator.Name = AuthDelegatorBinding
		objs = append(append(objs, accounts...), delegator)
	}
	seen := map[string]string{}
	for i, team := range teams {
		if len(a.Teams[team]) == 0 {
			return nil, fmt.Errorf("teams.%s: no namespace", team)
		}
		var own []rbacv1.Subject
		if workspaces != nil {
			own = workspaces[i : i+1]
		}
		for _, ns := range a.Teams[team] {
			if other, taken := seen[ns]; taken {
				return nil, fmt.Errorf("teams.%s: namespace %s is team %s's already: a namespace belongs to one team", team, ns, other)
			}
			seen[ns] = team
			objs = append(objs, TeamNamespace(team, ns, a.WorkerRuntimeClass), TeamBinding(team, ns, own...))
		}
	}
	// As plain JSON objects, which the provider's ConfigGroup takes.
	out := make([]any, len(objs))
	for i, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

// NewSite registers the site's objects under one component.
func NewSite(ctx *pulumi.Context, name string, args SiteArgs, opts ...pulumi.ResourceOption) (*Site, error) {
	objs, err := Objects(args)
	if err != nil {
		return nil, err
	}
	s := &Site{}
	if err := ctx.RegisterComponentResource(SiteToken, name, s, opts...); err != nil {
		return nil, err
	}
	arr := pulumi.Array{}
	for _, o := range objs {
		arr = append(arr, pulumi.ToMap(o.(map[string]any)))
	}
	group, err := yamlv2.NewConfigGroup(ctx, name, &yamlv2.ConfigGroupArgs{Objs: arr}, pulumi.Parent(s))
	if err != nil {
		return nil, err
	}
	var namespaces []string
	for _, team := range args.Teams {
		namespaces = append(namespaces, team...)
	}
	slices.Sort(namespaces)
	// Known once every object is applied.
	applied := group.Resources.ApplyT(func([]any) string { return "" }).(pulumi.StringOutput)
	after := func(v string) pulumi.StringOutput {
		return applied.ApplyT(func(string) string { return v }).(pulumi.StringOutput)
	}
	s.PodPolicy, s.GraphPolicy = after(PolicyName), after(GraphPolicyName)
	s.Namespaces = applied.ApplyT(func(string) []string { return namespaces }).(pulumi.StringArrayOutput)
	return s, ctx.RegisterResourceOutputs(s, pulumi.Map{"podPolicy": s.PodPolicy, "graphPolicy": s.GraphPolicy, "namespaces": s.Namespaces})
}
