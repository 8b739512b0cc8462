package components

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
	"minimax-m3/manifest"
)

const (
	gatewayAPIVersion = "gateway.networking.k8s.io/v1"
	exposureType      = "minimax-m3:index:Exposure"
)

// ExposureArgs describes the route from the site's Gateway to the frontend.
type ExposureArgs struct {
	Namespace pulumi.StringInput
	Config    *config.Config
	Meta      StackMeta
}

// Exposure is the frontend reachable through the site's Gateway: one HTTPRoute.
type Exposure struct {
	pulumi.ResourceState
	// URL is where clients reach the frontend.
	URL pulumi.StringOutput `pulumi:"url"`
}

// NewExposure creates the HTTPRoute, as a child of parent (the graph).
func NewExposure(ctx *pulumi.Context, name string, args *ExposureArgs, opts ...pulumi.ResourceOption) (*Exposure, error) {
	e := &Exposure{}
	if err := ctx.RegisterComponentResource(exposureType, name, e, opts...); err != nil {
		return nil, err
	}
	c := args.Config
	route, err := newObject(ctx, c.RouteName(), objectArgs{
		APIVersion: gatewayAPIVersion, Kind: "HTTPRoute",
		Name: c.RouteName(), Namespace: args.Namespace, Labels: stackLabels(ctx),
		Annotations: args.Meta.annotations(ctx, "HTTPRoute", c.RouteName(), nil),
		Spec:        Route(c),
	}, pulumi.Parent(e))
	if err != nil {
		return nil, err
	}
	e.URL = route.Metadata.Name().ApplyT(func(*string) string { return c.ExternalURL() }).(pulumi.StringOutput)
	return e, ctx.RegisterResourceOutputs(e, pulumi.Map{"url": e.URL})
}

// Route is the HTTPRoute's spec: the hostname's <pathPrefix>v1, on the site's Gateway (its listener
// when one is named), to the frontend Service the operator creates at /v1, with the request timeout
// set.
func Route(c *config.Config) gatewayv1.HTTPRouteSpec {
	e := c.Exposure
	ns := gatewayv1.Namespace(e.Gateway.Namespace)
	parent := gatewayv1.ParentReference{Namespace: &ns, Name: gatewayv1.ObjectName(e.Gateway.Name)}
	if e.Gateway.SectionName != "" {
		section := gatewayv1.SectionName(e.Gateway.SectionName)
		parent.SectionName = &section
	}
	prefix := gatewayv1.PathMatchPathPrefix
	timeout := gatewayv1.Duration(e.RequestTimeout)
	match := c.RoutePrefix() + OpenAIPath
	rule := gatewayv1.HTTPRouteRule{
		Matches:     []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: &match}}},
		BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: RouteBackend(c)}}},
		Timeouts:    &gatewayv1.HTTPRouteTimeouts{Request: &timeout},
	}
	if c.RoutePrefix() != "" {
		// The frontend serves the API at /v1: hand it the path without the site's prefix.
		replace := OpenAIPath
		rule.Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterURLRewrite, URLRewrite: &gatewayv1.HTTPURLRewriteFilter{
			Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: &replace},
		}}}
	}
	return gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{parent}},
		Hostnames:       []gatewayv1.Hostname{gatewayv1.Hostname(e.Hostname)},
		Rules:           []gatewayv1.HTTPRouteRule{rule},
	}
}

// RouteBackend is where the route sends requests: the frontend Service the operator creates, or
// (backend inferencePool) the InferencePool it makes for the graph's endpoint picker, on the port
// of the workers' frontend sidecars.
func RouteBackend(c *config.Config) gatewayv1.BackendObjectReference {
	port := gatewayv1.PortNumber(config.FrontendPort)
	if c.InferencePool() {
		group := gatewayv1.Group(manifest.InferencePools.Group)
		kind := gatewayv1.Kind("InferencePool")
		return gatewayv1.BackendObjectReference{Group: &group, Kind: &kind, Name: gatewayv1.ObjectName(c.InferencePoolName()), Port: &port}
	}
	return gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(c.FrontendServiceName()), Port: &port}
}

// OpenAIPath is where the frontend serves the OpenAI API: the only path the route carries (the
// frontend's metrics, docs and admin endpoints share its port and have no authentication).
const OpenAIPath = "/v1"

// coveringHostname says which of a route's hostnames covers hostname, as Gateway API matches them:
// the same name, a wildcard over it (*.example.com covers a.example.com and a.b.example.com), or
// none at all (the route takes every hostname its listener accepts). "" when none does.
func coveringHostname(hostnames []string, hostname string) string {
	if len(hostnames) == 0 {
		return "none, so every hostname of the listener"
	}
	for _, h := range hostnames {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if h == hostname {
			return h
		}
		if suffix, ok := strings.CutPrefix(h, "*"); ok && strings.HasSuffix(hostname, suffix) {
			return h
		}
	}
	return ""
}

// RouteLister lists the HTTPRoutes of the cluster (cluster.Reader does).
type RouteLister interface {
	Routes(ctx context.Context) ([]cluster.Route, error)
}

// checkRouteHostname refuses a hostname another stack, team or tool already routes on the same
// Gateway, before anything is created: two routes of one hostname on one Gateway split or steal
// each other's traffic, and which one wins is the Gateway's choice.
func checkRouteHostname(ctx *pulumi.Context, reader ObjectReader, c *config.Config, previous string) error {
	lister, ok := reader.(RouteLister)
	if !ok || !c.Exposure.Enabled {
		return nil
	}
	routes, err := lister.Routes(ctx.Context())
	if err != nil {
		if c.Kubernetes.RequireRead {
			return unreadable(fmt.Errorf("listing HTTPRoutes: %w", err))
		}
		_ = ctx.Log.Warn("not checking that no other route holds exposure.hostname: listing HTTPRoutes: "+err.Error(), nil)
		return nil
	}
	e := c.Exposure
	var ps config.Problems
	for _, r := range routes {
		if r.Namespace == c.Namespace.Name && r.Name == c.RouteName() {
			continue // the stack's own, or the ownership check's to refuse
		}
		covers := coveringHostname(r.Hostnames, e.Hostname)
		if covers == "" || !slices.Contains(r.Gateways, e.Gateway.Namespace+"/"+e.Gateway.Name) {
			continue
		}
		owner := "not a stack's"
		if other := otherStack(r.LiveObject); other != "" {
			owner = "stack " + other + "'s"
		}
		if ownedBy(r.LiveObject, ctx.Stack(), StackIdentity(ctx), previous) {
			continue
		}
		ps.Add("exposure.hostname", "%q is already routed on Gateway %s/%s by HTTPRoute %s/%s (%s; its hostnames: %s): the two routes would split or take each other's traffic; choose a hostname of the stack's own, which no other route covers",
			e.Hostname, e.Gateway.Namespace, e.Gateway.Name, r.Namespace, r.Name, owner, covers)
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}
