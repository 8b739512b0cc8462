package components

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"minimax-m3/config"
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
		BackendRefs: RouteBackends(c),
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

// RouteBackends are the route's backends: the graph's (RouteBackend) for a stack of one graph, as
// the recipe's route has it; with several, every graph's, each with weight 1 (an even share of
// requests: the graphs are alike).
func RouteBackends(c *config.Config) []gatewayv1.HTTPBackendRef {
	if !c.ScaledOut() {
		return []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: RouteBackend(c)}}}
	}
	var out []gatewayv1.HTTPBackendRef
	for _, g := range c.Graphs() {
		weight := int32(1)
		out = append(out, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: RouteBackend(g), Weight: &weight}})
	}
	return out
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
