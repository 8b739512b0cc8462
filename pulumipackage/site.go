package pulumipackage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	rbacv1 "k8s.io/api/rbac/v1"

	"minimax-m3/teamboundary"
)

// siteResource is the Site component's schema: what a site installs once per cluster
// (package teamboundary), as a resource of the package.
func siteResource() map[string]any {
	strs := map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	with := func(m map[string]any, description string) map[string]any {
		out := map[string]any{"description": description}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return map[string]any{
		"isComponent": true,
		"description": "What a site installs once per cluster so that Kubernetes itself keeps the teams sharing a GB200 " +
			"fleet apart: the admission policies (Pod Security baseline with the workers' one exemption, and the fleet's " +
			"rules, in CEL run by the API server) and their bindings, each team's namespaces (Pod Security baseline " +
			"enforced) with the team's role bound to its group, the fleet reader, and optionally the portal's right to " +
			"impersonate the teams and each team's workspace ServiceAccount for the Pulumi Kubernetes Operator. Run by " +
			"whoever runs the fleet, never by a team. Its inputs must be known when it is previewed.",
		"inputProperties": map[string]any{
			"teams": map[string]any{"type": "object", "additionalProperties": strs,
				"description": "Each team (its group at the API server) and the namespaces it gets; a namespace belongs to one team."},
			"workerRuntimeClass": map[string]any{"type": "string", "description": "The GPU workers' RuntimeClass, which the API " +
				"server's Pod Security configuration exempts (the policy then holds those pods to baseline with the workers' one exemption)."},
			"priorityClasses": with(strs, "The priority classes the teams' pods may name; none by default."),
			"portalUser": map[string]any{"type": "string", "description": "The portal's user at the API server, which may " +
				"impersonate the teams' groups and users (the portal's -impersonate). Left out: no one may."},
			"portalServiceAccount": map[string]any{"type": "string", "description": "The portal's ServiceAccount as " +
				"namespace/name, instead of portalUser."},
			"workspaces": map[string]any{"type": "string", "description": "The namespace of the Pulumi Kubernetes Operator's " +
				"Stacks: each team gets a ServiceAccount minimax-m3-<team> there, bound as the team's group is, for its " +
				"workspace pods to run as. Left out: none."},
		},
		"requiredInputs": []string{"teams", "workerRuntimeClass"},
		"properties": map[string]any{
			"podPolicy":   map[string]any{"type": "string", "description": "The pod admission policy (and its binding)."},
			"graphPolicy": map[string]any{"type": "string", "description": "The graph admission policy (and its binding)."},
			"namespaces":  with(strs, "The team namespaces, sorted."),
		},
		"required": []string{"graphPolicy", "namespaces", "podPolicy"},
	}
}

// siteInputs are the Site's inputs as a program passes them.
type siteInputs struct {
	Teams                map[string][]string `json:"teams"`
	WorkerRuntimeClass   string              `json:"workerRuntimeClass"`
	PriorityClasses      []string            `json:"priorityClasses"`
	PortalUser           string              `json:"portalUser"`
	PortalServiceAccount string              `json:"portalServiceAccount"`
	Workspaces           string              `json:"workspaces"`
}

// SiteArgs reads the Site's inputs, every one known (they decide which objects exist), into
// teamboundary.SiteArgs; a problem names its input, before anything is registered.
func SiteArgs(inputs resource.PropertyMap) (teamboundary.SiteArgs, error) {
	plain := map[string]any{}
	var unknown []string
	for _, key := range inputs.StableKeys() {
		v, _, known := plainValue(inputs[key])
		if !known {
			unknown = append(unknown, string(key))
			continue
		}
		plain[string(key)] = v
	}
	if len(unknown) > 0 {
		return teamboundary.SiteArgs{}, fmt.Errorf("%s: not known yet (another resource's output, during a preview): the site's objects must be known when it is previewed", strings.Join(unknown, ", "))
	}
	b, err := json.Marshal(plain)
	if err != nil {
		return teamboundary.SiteArgs{}, err
	}
	var in siteInputs
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return teamboundary.SiteArgs{}, fmt.Errorf("the Site's inputs: %w", err)
	}
	args := teamboundary.SiteArgs{Teams: in.Teams, WorkerRuntimeClass: in.WorkerRuntimeClass, PriorityClasses: in.PriorityClasses, Workspaces: in.Workspaces}
	switch {
	case in.PortalUser != "" && in.PortalServiceAccount != "":
		return args, errors.New("portalServiceAccount: name the portal's identity once, portalUser or portalServiceAccount")
	case in.PortalUser != "":
		args.Portal = &rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: in.PortalUser}
	case in.PortalServiceAccount != "":
		ns, name, ok := strings.Cut(in.PortalServiceAccount, "/")
		if !ok || ns == "" || name == "" {
			return args, fmt.Errorf("portalServiceAccount: %q is not namespace/name", in.PortalServiceAccount)
		}
		args.Portal = &rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
	}
	// What the site's objects refuse, before anything is registered.
	if _, err := teamboundary.Objects(args); err != nil {
		return args, err
	}
	return args, nil
}

// constructSite builds a Site from a program's inputs.
func (p *Provider) constructSite(ctx context.Context, req *pulumirpc.ConstructRequest) (*pulumirpc.ConstructResponse, error) {
	inputs, err := inputsOf(req)
	if err != nil {
		return nil, err
	}
	args, err := SiteArgs(inputs)
	if err != nil {
		return nil, err
	}
	return provider.Construct(ctx, req, p.host.EngineConn(), func(pctx *pulumi.Context, _, name string, _ provider.ConstructInputs, opts pulumi.ResourceOption) (*provider.ConstructResult, error) {
		s, err := teamboundary.NewSite(pctx, name, args, opts)
		if err != nil {
			return nil, err
		}
		return &provider.ConstructResult{URN: s.URN(), State: pulumi.Map{"podPolicy": s.PodPolicy, "graphPolicy": s.GraphPolicy, "namespaces": s.Namespaces}}, nil
	})
}
