package unit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"minimax-m3/components"
	"minimax-m3/internal/cluster"
	"minimax-m3/manifest"
	"minimax-m3/policy"
)

const httpRouteType = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"

// exposureOn routes the frontend through Gateway gateways/shared as llm.example.com, with the
// given other fields of exposure (JSON values).
func exposureOn(fields map[string]string) map[string]string {
	parts := []string{`"enabled": true`, `"hostname": "llm.example.com"`}
	if _, ok := fields["gateway"]; !ok {
		parts = append(parts, `"gateway": {"namespace": "gateways", "name": "shared", "sectionName": "https"}`)
	}
	for k, v := range fields {
		parts = append(parts, fmt.Sprintf("%q: %s", k, v))
	}
	return map[string]string{"minimax-m3:exposure": "{" + strings.Join(parts, ", ") + "}"}
}

func TestExposureIsOffByDefault(t *testing.T) {
	for _, stack := range []string{"agg", "disagg"} {
		r := mustRun(t, stack, nil)
		assert.Empty(t, r.byType(httpRouteType), stack)
		assert.NotContains(t, r.outputs, "externalUrl", stack)
	}
}

func TestExposureRoutesTheSitesGatewayToTheFrontend(t *testing.T) {
	r := mustRun(t, "disagg", exposureOn(nil))
	route := r.one(t, httpRouteType)
	assert.Contains(t, route.RPC.GetParent(), "minimax-m3:index:Exposure", "under the graph's component in preview")
	assert.Equal(t, "inference", decode[string](t, route, "metadata", "namespace"))
	spec := decode[gatewayv1.HTTPRouteSpec](t, route, "spec")
	require.Len(t, spec.ParentRefs, 1)
	p := spec.ParentRefs[0]
	assert.Equal(t, "gateways/shared/https", string(*p.Namespace)+"/"+string(p.Name)+"/"+string(*p.SectionName))
	assert.Equal(t, []gatewayv1.Hostname{"llm.example.com"}, spec.Hostnames)
	require.Len(t, spec.Rules, 1)
	rule := spec.Rules[0]
	assert.Equal(t, "/v1", *rule.Matches[0].Path.Value, "the OpenAI API only: not the frontend's metrics, docs or admin endpoints")
	assert.Empty(t, rule.Filters)
	assert.Equal(t, gatewayv1.PathMatchPathPrefix, *rule.Matches[0].Path.Type)
	require.Len(t, rule.BackendRefs, 1)
	assert.Equal(t, gatewayv1.ObjectName("minimax-m3-disagg-gb200-agentic-frontend"), rule.BackendRefs[0].Name, "the Service the operator makes for the frontend")
	assert.Equal(t, gatewayv1.PortNumber(8000), *rule.BackendRefs[0].Port)
	assert.Nil(t, rule.BackendRefs[0].Namespace, "its own namespace")
	assert.Equal(t, gatewayv1.Duration("2h"), *rule.Timeouts.Request, "long completions outlive a gateway's default timeout")
	assert.Equal(t, "https://llm.example.com", r.outputs["externalUrl"])

	http := mustRun(t, "agg", exposureOn(map[string]string{"scheme": `"http"`, "pathPrefix": `"/m3/"`, "gateway": `{"namespace": "gateways", "name": "shared"}`}))
	assert.Equal(t, "http://llm.example.com/m3", http.outputs["externalUrl"], "clients call <externalUrl>/v1/...")
	prefixed := decode[gatewayv1.HTTPRouteSpec](t, http.one(t, httpRouteType), "spec").Rules[0]
	assert.Equal(t, "/m3/v1", *prefixed.Matches[0].Path.Value)
	require.Len(t, prefixed.Filters, 1)
	assert.Equal(t, "/v1", *prefixed.Filters[0].URLRewrite.Path.ReplacePrefixMatch, "the frontend serves the API at /v1")
	assert.Empty(t, policy.Check(plan(t, "agg", exposureOn(nil))), "the program's route passes the policies")
}

func TestExposureThatCannotRouteNamesItsKey(t *testing.T) {
	for key, fields := range map[string]map[string]string{
		"exposure.gateway.name":        {"gateway": `{"namespace": "gateways"}`},
		"exposure.gateway.namespace":   {"gateway": `{"name": "shared"}`},
		"exposure.hostname":            {"hostname": `"*.example.com"`},
		"exposure.pathPrefix":          {"pathPrefix": `"v1"`},
		"exposure.pathPrefix ":         {"pathPrefix": `"/a/../admin"`},
		"exposure.gateway.sectionName": {"gateway": `{"namespace": "gateways", "name": "shared"}`},
		"exposure.scheme":              {"scheme": `"grpc"`},
		"exposure.requestTimeout":      {"requestTimeout": `"2 hours"`},
	} {
		_, err := run(t, "agg", exposureOn(fields))
		require.Error(t, err, key)
		assert.Contains(t, err.Error(), "minimax-m3:"+strings.TrimSpace(key)+":", key)
	}
	_, err := run(t, "agg", map[string]string{"minimax-m3:exposure": `{"enabled": true}`})
	require.Error(t, err)
	for _, key := range []string{"exposure.gateway.name", "exposure.gateway.namespace", "exposure.hostname"} {
		assert.Contains(t, err.Error(), "minimax-m3:"+key+": is required", "what a route needs, each at its key")
	}
}

// routedCluster is a cluster that serves Gateway API and holds these HTTPRoutes.
type routedCluster struct {
	fakeCluster
	routes []cluster.Route
	served bool
}

func (c routedCluster) Routes(context.Context) ([]cluster.Route, error) { return c.routes, nil }

func (c routedCluster) Served(_ context.Context, gvr schema.GroupVersionResource) (bool, error) {
	return c.served || gvr.Group != "gateway.networking.k8s.io", nil
}

func TestExposureOnAClusterWithoutGatewayAPIIsRefusedBeforeAnythingIsCreated(t *testing.T) {
	r, err := runWith(t, components.Options{Cluster: routedCluster{}}, "agg", exposureOn(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:exposure.enabled: the cluster does not serve httproutes (gateway.networking.k8s.io/v1): install Gateway API's CRDs and a Gateway controller")
	assert.Empty(t, r.resources, "nothing is registered")
}

func TestExposureKeepsOffAHostnameAnotherStackRoutes(t *testing.T) {
	theirs := cluster.Route{
		LiveObject: cluster.LiveObject{Annotations: map[string]string{"minimax-m3.io/stack": "organization/minimax-m3/team-b"}},
		Namespace:  "team-b", Name: "their-graph", Hostnames: []string{"llm.example.com"}, Gateways: []string{"gateways/shared"},
	}
	_, err := runWith(t, components.Options{Cluster: routedCluster{served: true, routes: []cluster.Route{theirs}}}, "agg", exposureOn(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `minimax-m3:exposure.hostname: "llm.example.com" is already routed on Gateway gateways/shared by HTTPRoute team-b/their-graph (stack organization/minimax-m3/team-b's; its hostnames: llm.example.com)`)

	// A route of no stack (kubectl, another tool) holds it just as well.
	theirs.LiveObject = cluster.LiveObject{}
	_, err = runWith(t, components.Options{Cluster: routedCluster{served: true, routes: []cluster.Route{theirs}}}, "agg", exposureOn(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(not a stack's; ")

	// A wildcard over it, or a route of no hostname (every hostname its listener takes), would lose
	// the traffic to the stack's more specific route.
	for covers, hostnames := range map[string][]string{"*.example.com": {"*.example.com"}, "none, so every hostname of the listener": nil} {
		cover := theirs
		cover.Hostnames = hostnames
		_, err = runWith(t, components.Options{Cluster: routedCluster{served: true, routes: []cluster.Route{cover}}}, "agg", exposureOn(nil))
		require.Error(t, err, covers)
		assert.Contains(t, err.Error(), "its hostnames: "+covers+"): the two routes would split or take each other's traffic")
	}

	// The same hostname on another Gateway, another hostname on this one, and the stack's own
	// route are no conflict.
	other := theirs
	other.Gateways = []string{"gateways/internal"}
	another := theirs
	another.Hostnames = []string{"other.example.com"}
	own := cluster.Route{LiveObject: cluster.LiveObject{Annotations: map[string]string{"minimax-m3.io/stack": "organization/minimax-m3/agg"}},
		Namespace: "inference", Name: "minimax-m3-agg-gb200-agentic", Hostnames: []string{"llm.example.com"}, Gateways: []string{"gateways/shared"}}
	_, err = runWith(t, components.Options{Cluster: routedCluster{served: true, routes: []cluster.Route{other, another, own}}}, "agg", exposureOn(nil))
	require.NoError(t, err)
}

func TestPolicyRoutesOwnBackends(t *testing.T) {
	p := plan(t, "agg", exposureOn(nil))
	route := step(t, p, "HTTPRoute")
	ref := route.New["spec"].(map[string]any)["rules"].([]any)[0].(map[string]any)["backendRefs"].([]any)[0].(map[string]any)
	ref["namespace"] = "team-b"
	vs := policy.Check(p)
	assert.Equal(t, []string{"routes-own-backends"}, rules(vs))
	assert.Contains(t, vs[0].String(), "rules[0].backendRefs[0] sends traffic to namespace team-b, not its own inference")

	// A mirror of the requests is traffic too.
	delete(ref, "namespace")
	rule := route.New["spec"].(map[string]any)["rules"].([]any)[0].(map[string]any)
	rule["filters"] = []any{map[string]any{"type": "RequestMirror", "requestMirror": map[string]any{"backendRef": map[string]any{"name": "tap", "namespace": "team-c", "port": 80}}}}
	vs = policy.Check(p)
	assert.Equal(t, []string{"routes-own-backends"}, rules(vs))
	assert.Contains(t, vs[0].String(), "rules[0].filters[0].requestMirror.backendRef sends traffic to namespace team-c")
}

// The hostname check reads the cluster's HTTPRoutes: a parent without a namespace is a Gateway in
// the route's own, a parent of another kind (a Service, for mesh routing) is no Gateway, and a
// route's hostnames and ownership come as they are.
func TestReaderListsRoutesWithTheirGateways(t *testing.T) {
	route := func(ns, name string, hostnames []any, parents ...map[string]any) *unstructured.Unstructured {
		refs := make([]any, 0, len(parents))
		for _, p := range parents {
			refs = append(refs, p)
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
			"metadata": map[string]any{"name": name, "namespace": ns, "annotations": map[string]any{"minimax-m3.io/stack": "organization/minimax-m3/b"}},
			"spec":     map[string]any{"hostnames": hostnames, "parentRefs": refs},
		}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{manifest.HTTPRoutes: "HTTPRouteList"},
		route("team-b", "local", []any{"b.example.com"}, map[string]any{"name": "own-gw"}),
		route("team-c", "mixed", nil, map[string]any{"name": "shared", "namespace": "gateways"}, map[string]any{"kind": "Service", "name": "mesh"}),
	)
	routes, err := cluster.NewFromClients(nil, dyn).Routes(context.Background())
	require.NoError(t, err)
	byName := map[string]cluster.Route{}
	for _, r := range routes {
		byName[r.Namespace+"/"+r.Name] = r
	}
	require.Len(t, byName, 2)
	assert.Equal(t, []string{"team-b/own-gw"}, byName["team-b/local"].Gateways, "no namespace: the route's own")
	assert.Equal(t, []string{"b.example.com"}, byName["team-b/local"].Hostnames)
	assert.Equal(t, "organization/minimax-m3/b", byName["team-b/local"].Annotations["minimax-m3.io/stack"])
	assert.Equal(t, []string{"gateways/shared"}, byName["team-c/mixed"].Gateways, "a Service parent is no Gateway")
	assert.Empty(t, byName["team-c/mixed"].Hostnames, "no hostnames: every name its listener takes")
}

// gatewayCluster serves Gateway API and holds one Gateway (none when gateway is nil).
type gatewayCluster struct {
	routedCluster
	gateway *cluster.Gateway
}

func (c gatewayCluster) Gateway(_ context.Context, namespace, name string) (cluster.Gateway, bool, error) {
	if c.gateway == nil || c.gateway.Namespace != namespace || c.gateway.Name != name {
		return cluster.Gateway{}, false, nil
	}
	return *c.gateway, true, nil
}

// What preview can know of the site's Gateway it checks before anything is created: the Gateway
// exists, has the listener named, and one of the listeners the route attaches to takes an HTTPRoute
// from the stack's namespace. Each refusal names the keys involved; nothing is registered.
func TestTheRouteIsRefusedWhereTheGatewayWouldNotTakeIt(t *testing.T) {
	listener := func(name, from string, sel *metav1.LabelSelector, kinds ...string) cluster.Listener {
		return cluster.Listener{Name: name, From: from, Selector: sel, Kinds: kinds}
	}
	gw := func(ls ...cluster.Listener) *cluster.Gateway {
		return &cluster.Gateway{Namespace: "gateways", Name: "shared", Listeners: ls}
	}
	team := &metav1.LabelSelector{MatchLabels: map[string]string{"gateway-access": "true"}}
	for _, tc := range []struct {
		name    string
		gateway *cluster.Gateway
		labels  map[string]string // the stack's namespace's, when it exists
		want    string
	}{
		{"no such Gateway", nil, nil, "minimax-m3:exposure.gateway.name: Gateway gateways/shared does not exist (exposure.gateway.namespace gateways, exposure.gateway.name shared)"},
		{"no such listener", gw(listener("http", "All", nil)), nil, `minimax-m3:exposure.gateway.sectionName: Gateway gateways/shared has no listener "https" (its listeners: http)`},
		{"a listener for its own namespace only", gw(listener("https", "Same", nil)), nil,
			"minimax-m3:exposure.gateway.sectionName: Gateway gateways/shared takes no HTTPRoute from namespace.name inference: listener https admits routes from its own namespace only (allowedRoutes.namespaces.from: Same)"},
		{"a listener for labelled namespaces", gw(listener("https", "Selector", team)), map[string]string{"team": "a"}, "listener https admits routes from namespaces labelled gateway-access=true only"},
		{"a listener for GRPCRoutes", gw(listener("https", "All", nil, "GRPCRoute")), nil, "listener https admits only GRPCRoute"},
		{"admitted from all namespaces", gw(listener("https", "All", nil)), nil, ""},
		{"admitted by its labels", gw(listener("https", "Selector", team)), map[string]string{"gateway-access": "true"}, ""},
		{"a namespace not there yet passes a selector", gw(listener("https", "Selector", team)), nil, ""},
	} {
		fc, overrides := fakeCluster{}, exposureOn(nil)
		if tc.labels != nil {
			// A namespace of the team's, which the stack uses.
			fc["namespaces//inference"] = tc.labels
			overrides["minimax-m3:namespace"] = `{"name": "inference", "create": false}`
		}
		r, err := runWith(t, components.Options{Cluster: gatewayCluster{routedCluster{fakeCluster: fc, served: true}, tc.gateway}}, "agg", overrides)
		if tc.want == "" {
			assert.NoError(t, err, tc.name)
			continue
		}
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
		assert.Empty(t, r.resources, "%s: nothing is registered", tc.name)
	}
}
