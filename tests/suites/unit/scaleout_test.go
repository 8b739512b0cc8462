package unit

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"minimax-m3/components"
	"minimax-m3/manifest"
	"minimax-m3/placement"
)

// scaleOut runs graphs graphs of the stack's config; agg gets the clique label as the deploy guide
// sets it on a pool of several racks.
func scaleOut(stack string, graphs int, more map[string]string) map[string]string {
	o := map[string]string{"minimax-m3:scaleOut": fmt.Sprintf(`{"graphs": %d}`, graphs)}
	if stack == "agg" {
		o["minimax-m3:placement"] = `{"topologyKey": "nvidia.com/gpu.clique"}`
	}
	maps.Copy(o, more)
	return o
}

// graphsOf are the stack's DynamoGraphDeployments by name.
func graphsOf(t *testing.T, r *result) map[string]recorded {
	out := map[string]recorded{}
	for _, res := range r.resources {
		if strings.HasSuffix(res.Type, ":DynamoGraphDeployment") {
			out[decode[string](t, res, "metadata", "name")] = res
		}
	}
	return out
}

// namesOf are the Kubernetes names of the resources of a type token.
func namesOf(t *testing.T, r *result, typ string) []string {
	var out []string
	for _, res := range r.byType(typ) {
		out = append(out, decode[string](t, res, "metadata", "name"))
	}
	slices.Sort(out)
	return out
}

// A stack of two graphs on a pool of three partly used racks: each graph whole in a clique of its
// own (the two tightest that hold one), each with its own ComputeDomain and channel, the cache, its
// download and the token shared, one route to both frontends once each serves.
func TestScaleOutPlacesEachGraphWholeInACliqueOfItsOwn(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			need := p.gpus / 4
			// a holds half a graph; b and c one each (c with a tray to spare: the looser fit).
			a, b, c := gb200Rack("a", need), gb200Rack("b", need+2), gb200Rack("c", need+2)
			pods := append(append(teamPods(a, need/2), teamPods(b, 2)...), teamPods(c, 1)...)
			cluster := poolCluster{fakeCluster{}, placement.Pool{Nodes: slices.Concat(a, b, c), Pods: pods}}
			r, err := runWith(t, components.Options{Cluster: cluster}, p.stack, scaleOut(p.stack, 2, exposureOn(nil)))
			require.NoError(t, err)

			second := "g2-" + p.graph
			graphs := graphsOf(t, r)
			require.Len(t, graphs, 2)
			want := map[string]string{p.graph: "fabric.b", second: "fabric.c"}
			for name, fabric := range want {
				g, ok := graphs[name]
				require.True(t, ok, name)
				assert.Equal(t, clique+"="+fabric, decode[map[string]string](t, g, "metadata", "annotations")[manifest.PlacementAnnotation], name)
				spec := decode[manifest.DynamoGraphDeploymentSpec](t, g, "spec")
				for _, comp := range spec.Components[1:] {
					if comp.Name == manifest.EndpointPickerName {
						continue
					}
					assert.Contains(t, requiredTerms(comp.PodTemplate.Spec), corev1.NodeSelectorRequirement{Key: clique, Operator: corev1.NodeSelectorOpIn, Values: []string{fabric}}, "%s %s", name, comp.Name)
					require.Len(t, comp.PodTemplate.Spec.ResourceClaims, 1)
					assert.Equal(t, name+"-cd-channel", *comp.PodTemplate.Spec.ResourceClaims[0].ResourceClaimTemplateName, "%s's workers claim their own graph's channel", name)
				}
				assert.Empty(t, spec.Components[0].PodTemplate.Labels, "%s's frontend template is a stack of one graph's", name)
			}
			assert.Equal(t, []string{second + "-cd", p.graph + "-cd"}, namesOf(t, r, "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain"))
			assert.Equal(t, []string{second + "-config", p.graph + "-config"}, namesOf(t, r, "kubernetes:core/v1:ConfigMap"))
			for _, shared := range []string{"kubernetes:core/v1:PersistentVolumeClaim", "kubernetes:batch/v1:Job", "kubernetes:core/v1:Secret", "kubernetes:core/v1:Namespace", httpRouteType} {
				assert.Len(t, r.byType(shared), 1, "one %s for the stack", shared)
			}

			// One route: both frontends, an even share each.
			route := decode[gatewayv1.HTTPRouteSpec](t, r.one(t, httpRouteType), "spec")
			require.Len(t, route.Rules, 1)
			var backends []string
			for _, ref := range route.Rules[0].BackendRefs {
				require.NotNil(t, ref.Weight)
				assert.Equal(t, int32(1), *ref.Weight)
				backends = append(backends, string(ref.Name))
			}
			assert.Equal(t, []string{p.graph + "-frontend", second + "-frontend"}, backends)
			exposure := r.named(t, "minimax-m3:index:Exposure", "exposure")
			assert.True(t, dependsOn(exposure, "DynamoGraphDeployment::graph") && dependsOn(exposure, "DynamoGraphDeployment::graph-2"),
				"a graph joins the route once it is Ready: %v", exposure.RPC.GetDependencies())

			// In the cluster, every frontend by name.
			assert.Equal(t, p.graph+"-frontend", r.outputs["frontendService"], "the first graph's, as with one graph")
			assert.Equal(t, []any{"http://" + p.graph + "-frontend.inference.svc.cluster.local:8000", "http://" + second + "-frontend.inference.svc.cluster.local:8000"}, r.outputs["frontendUrls"])
			assert.Equal(t, "kubectl -n inference wait --for=condition=Ready dynamographdeployment/"+p.graph+" dynamographdeployment/"+second+" --timeout=2h", r.outputs["waitCommand"])
			assert.Contains(t, r.outputs["externalUrl"], "https://llm.example.com", "one entry point through the Gateway, as with one graph")
			assert.EqualValues(t, 2*p.gpus, r.outputs["gpuCount"])
			outGraphs, ok := r.outputs["graphs"].([]any)
			require.True(t, ok, "%v", r.outputs["graphs"])
			require.Len(t, outGraphs, 2)
			assert.Equal(t, second, outGraphs[1].(map[string]any)["name"])
			assert.Equal(t, second+"-frontend", outGraphs[1].(map[string]any)["frontendService"])
			assert.Equal(t, second+"-cd", outGraphs[1].(map[string]any)["computeDomain"])
		})
	}
}

// scaleOut.graphs=1 is a stack without scale-out, object for object: the same logical names and
// the same inputs.
func TestOneGraphIsTheStackWithoutScaleOut(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			plainRun := mustRun(t, p.stack, exposureOn(nil))
			one := mustRun(t, p.stack, maps.Collect(func(yield func(string, string) bool) {
				for k, v := range exposureOn(nil) {
					if !yield(k, v) {
						return
					}
				}
				yield("minimax-m3:scaleOut", `{"graphs": 1}`)
			}))
			assert.Equal(t, registrations(t, plainRun), registrations(t, one))
			assert.Equal(t, plainRun.outputs, one.outputs)
			assert.NotContains(t, plainRun.outputs, "graphs")
		})
	}
}

// registrations are a run's resources as the engine sees them, by type and logical name: inputs,
// parent, dependencies (sorted) and timeouts. The mocks record them in the order registrations
// finish, which varies.
func registrations(t *testing.T, r *result) map[string]string {
	out := map[string]string{}
	for _, res := range r.resources {
		deps := slices.Clone(res.RPC.GetDependencies())
		slices.Sort(deps)
		b, err := json.Marshal(map[string]any{"inputs": plain(t, res.Inputs), "parent": res.RPC.GetParent(), "dependencies": deps,
			"timeouts": res.RPC.GetCustomTimeouts().String(), "deleteBeforeReplace": res.RPC.GetDeleteBeforeReplace(), "ignoreChanges": res.RPC.GetIgnoreChanges()})
		require.NoError(t, err)
		key := res.Type + "::" + res.Name
		require.NotContains(t, out, key, "two resources of one URN")
		out[key] = string(b)
	}
	return out
}

// With room for fewer graphs than asked, preview refuses at scaleOut.graphs with the table, saying
// how many fit, before anything is registered.
func TestScaleOutBeyondThePoolIsRefusedWithTheTable(t *testing.T) {
	a, b, c := gb200Rack("a", 6), gb200Rack("b", 6), gb200Rack("c", 6)
	// disagg needs six trays in one clique: only b has them free.
	pods := append(teamPods(a, 3), teamPods(c, 1)...)
	cluster := poolCluster{fakeCluster{}, placement.Pool{Nodes: slices.Concat(a, b, c), Pods: pods}}
	r, err := runWith(t, components.Options{Cluster: cluster}, "disagg", scaleOut("disagg", 2, nil))
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "minimax-m3:scaleOut.graphs: scaleOut.graphs is 2, one clique each, and no clique the stack's other graphs do not hold has room for graph g2-minimax-m3-disagg-gb200-agentic's 6 workers")
	assert.Contains(t, msg, "the pool holds 1 such graph(s) (fabric.b); free room, or set scaleOut.graphs to at most 1")
	assert.Regexp(t, `fabric\.b\s+6\s+24\s+6 of 6 workers  \(graph minimax-m3-disagg-gb200-agentic's\)`, msg)
	assert.Regexp(t, `fabric\.c\s+6\s+20\s+5 of 6 workers\n`, msg)
	for _, res := range r.resources {
		assert.NotContains(t, res.Type, "kubernetes:", "nothing is registered: %s %s", res.Type, res.Name)
	}
}

// Running graphs stay where they run, a new one goes to a clique none of them holds, and an update
// of running graphs changes them one at a time: each graph's after the one before it is Ready again.
func TestScaleOutKeepsRunningGraphsAndChangesThemOneAtATime(t *testing.T) {
	a, b, c := gb200Rack("a", 8), gb200Rack("b", 8), gb200Rack("c", 6)
	ns := "inference"
	first, second, third := "minimax-m3-disagg-gb200-agentic", "g2-minimax-m3-disagg-gb200-agentic", "g3-minimax-m3-disagg-gb200-agentic"
	var pods []corev1.Pod
	for _, g := range []struct {
		name  string
		trays []corev1.Node
	}{{first, a}, {second, b}} {
		for i, role := range []string{"PrefillWorker", "PrefillWorker", "PrefillWorker", "DecodeWorker", "DecodeWorker", "DecodeWorker"} {
			p := teamPods(g.trays[i:], 1)[0]
			p.Namespace, p.Name = ns, fmt.Sprintf("%s-w-%d", g.name, i)
			p.Labels = map[string]string{manifest.GraphNameLabel: g.name, manifest.ComponentLabel: role}
			pods = append(pods, p)
		}
	}
	ours := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "disagg"}
	live := fakeCluster{}
	for name, fabric := range map[string]string{first: "fabric.a", second: "fabric.b"} {
		l := maps.Clone(ours)
		l["@"+manifest.PlacementAnnotation] = clique + "=" + fabric
		live["dynamographdeployments/"+ns+"/"+name] = l
	}
	cluster := poolCluster{live, placement.Pool{Nodes: slices.Concat(a, b, c), Pods: pods}}

	// c (six free trays) is now the tightest fit for a new graph; the running ones stay.
	r, err := runWith(t, components.Options{Cluster: cluster}, "disagg", scaleOut("disagg", 3, map[string]string{"minimax-m3:decodeWorker": `{"vllm": {"maxNumSeqs": 48}}`}))
	require.NoError(t, err)
	graphs := graphsOf(t, r)
	for name, fabric := range map[string]string{first: "fabric.a", second: "fabric.b", third: "fabric.c"} {
		assert.Equal(t, clique+"="+fabric, decode[map[string]string](t, graphs[name], "metadata", "annotations")[manifest.PlacementAnnotation], name)
	}
	// The second graph's change waits for the first's Ready; the new third graph waits for no
	// other (a new graph serves nothing yet).
	component := func(name string) recorded { return r.named(t, "minimax-m3:index:DynamoGraph", name) }
	assert.True(t, dependsOn(component("graph-2"), "DynamoGraphDeployment::graph"), "graph 2 changes once graph 1 is Ready: %v", component("graph-2").RPC.GetDependencies())
	assert.False(t, dependsOn(component("graph"), "DynamoGraphDeployment::graph-2"), "graph 1 waits for no other graph")
	assert.False(t, dependsOn(component("graph-3"), "DynamoGraphDeployment::graph-2"), "a new graph is created beside the others, at once")
	assert.Equal(t, "graph-2", graphs[second].Name)
	assert.Equal(t, "graph-3", graphs[third].Name)

	// The next up reads each graph's Ready generation back from the graphs output: graphs it
	// leaves as they are need no wait (as for the first graph, graphReadyGeneration).
	assert.EqualValues(t, 1, r.outputs["graphs"].([]any)[1].(map[string]any)["readyGeneration"])
}

// dependsOn reports whether a resource depends on one whose URN ends with suffix.
func dependsOn(r recorded, suffix string) bool {
	return slices.ContainsFunc(r.RPC.GetDependencies(), func(urn string) bool { return strings.HasSuffix(urn, suffix) })
}

// Scale-out's settings are refused at their keys, with the key they conflict with named.
func TestScaleOutSettingsAreCheckedAtTheirKeys(t *testing.T) {
	for _, tc := range []struct {
		overrides map[string]string
		want      string
	}{
		{map[string]string{"minimax-m3:scaleOut": `{"graphs": 0}`}, "minimax-m3:scaleOut.graphs: is 0: it must be 1 to 16"},
		{map[string]string{"minimax-m3:scaleOut": `{"graphs": 17}`}, "minimax-m3:scaleOut.graphs: is 17: it must be 1 to 16"},
		{map[string]string{"minimax-m3:scaleOut": `{"graphs": 2}`}, "minimax-m3:scaleOut.graphs: is 2, which needs placement.topologyKey (nvidia.com/gpu.clique on GB200)"},
		{scaleOut("agg", 2, map[string]string{"minimax-m3:placement": `{"topologyKey": "nvidia.com/gpu.clique", "clique": "fabric.a"}`}),
			"minimax-m3:placement.clique: pins one graph, and scaleOut.graphs is 2: pin each graph with scaleOut.cliques instead"},
		{map[string]string{"minimax-m3:scaleOut": `{"graphs": 2, "cliques": ["fabric.a", "fabric.a"]}`, "minimax-m3:placement": `{"topologyKey": "nvidia.com/gpu.clique"}`},
			`minimax-m3:scaleOut.cliques[1]: is clique "fabric.a" again (scaleOut.cliques[0]): each graph needs a clique of its own`},
		{map[string]string{"minimax-m3:scaleOut": `{"graphs": 2, "cliques": ["fabric.a", "fabric.b", "fabric.c"]}`, "minimax-m3:placement": `{"topologyKey": "nvidia.com/gpu.clique"}`},
			"minimax-m3:scaleOut.cliques: pins 3 graphs, but scaleOut.graphs is 2"},
		{map[string]string{"minimax-m3:scaleOut": `{"graphs": 1, "cliques": ["fabric.a"]}`}, "minimax-m3:scaleOut.cliques: pins the graphs of a stack of several, and scaleOut.graphs is 1: pin its graph with placement.clique"},
		{scaleOut("agg", 2, map[string]string{"minimax-m3:placement": `{"topologyKey": "nvidia.com/gpu.clique", "check": false}`}),
			"minimax-m3:placement.check: is false, and scaleOut.graphs is 2 with 0 pinned by scaleOut.cliques"},
		{scaleOut("agg", 2, map[string]string{"minimax-m3:scaleOut": `{"graphs": 2, "drain": "0s"}`}), `minimax-m3:scaleOut.drain: "0s" is not a positive duration`},
		{scaleOut("agg", 2, maps.Collect(func(yield func(string, string) bool) {
			for k, v := range exposureOn(map[string]string{"requestTimeout": `"30m"`}) {
				yield(k, v)
			}
			yield("minimax-m3:scaleOut", `{"graphs": 2, "drain": "45m"}`)
		})), "minimax-m3:scaleOut.drain: is 45m, longer than exposure.requestTimeout (30m), after which the route ends a request anyway: at most that"},
		{scaleOut("agg", 2, map[string]string{"minimax-m3:graphName": "g"}),
			`minimax-m3:graphName: "g" makes graph 1's Dynamo namespace "inference-g" the beginning of graph 2's "inference-g2-g"`},
		{scaleOut("agg", 2, map[string]string{"minimax-m3:graphName": "minimax-m3-agg-gb200-agentic-with-a-long-name-x"}),
			`minimax-m3:scaleOut.graphs: graph 2's Worker Service name "g2-minimax-m3-agg-gb200-agentic-with-a-long-name-x-worker-00000000"`},
		{scaleOut("agg", 2, map[string]string{"minimax-m3:computeDomain": `{"create": false, "channelClaimTemplate": "shared-channel"}`}),
			"minimax-m3:computeDomain.create: is false, and scaleOut.graphs is 2: each graph needs a ComputeDomain of its own"},
	} {
		r, err := run(t, "agg", tc.overrides)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		for _, res := range r.resources {
			assert.NotContains(t, res.Type, "kubernetes:", "nothing is registered: %s %s", res.Type, res.Name)
		}
	}
}

// scaleOut.cliques pins each graph; a graph without an entry is placed beside them.
func TestScaleOutCliquesPinEachGraph(t *testing.T) {
	a, b, c := gb200Rack("a", 6), gb200Rack("b", 6), gb200Rack("c", 6)
	cluster := poolCluster{fakeCluster{}, placement.Pool{Nodes: slices.Concat(a, b, c)}}
	r, err := runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:scaleOut": `{"graphs": 2, "cliques": ["fabric.c"]}`})
	require.NoError(t, err)
	graphs := graphsOf(t, r)
	assert.Equal(t, clique+"=fabric.c", decode[map[string]string](t, graphs["minimax-m3-disagg-gb200-agentic"], "metadata", "annotations")[manifest.PlacementAnnotation])
	assert.Equal(t, clique+"=fabric.a", decode[map[string]string](t, graphs["g2-minimax-m3-disagg-gb200-agentic"], "metadata", "annotations")[manifest.PlacementAnnotation],
		"the first clique by name among the equally tight others")
}

// Each graph's Ready generation comes back from the graphs output: an up that leaves a graph at the
// generation an earlier up saw Ready does not wait for it again; one the output does not name (its
// earlier up never saw it Ready) is waited for.
func TestScaleOutReadsEachGraphsReadyGenerationBack(t *testing.T) {
	for graphs, waits := range map[string]int{
		`[{"name": "g2-minimax-m3-agg-gb200-agentic", "readyGeneration": 1}]`: 0,
		`[{"name": "g2-minimax-m3-agg-gb200-agentic", "readyGeneration": 0}]`: 1,
	} {
		w := &watchingCluster{fakeCluster: fakeCluster{}, before: 1, ready: true}
		previous := map[string]string{components.GraphReadyGenerationOutput: "1", components.GraphsOutput: graphs, "namespace": "inference", "graphName": "minimax-m3-agg-gb200-agentic"}
		_, err := runPrevious(t, previous, components.Options{Cluster: w}, "agg", scaleOut("agg", 2, nil))
		require.NoError(t, err)
		assert.Equal(t, waits, w.waits, "earlier outputs %s", graphs)
	}
}

// A pin on the clique another graph of the stack runs in is refused at the pin's key, before the
// pool is read: two graphs would share a clique. "" leaves a graph to the check.
func TestScaleOutPinOnAnotherGraphsCliqueIsRefused(t *testing.T) {
	ns := "inference"
	live := fakeCluster{"dynamographdeployments/" + ns + "/g2-minimax-m3-disagg-gb200-agentic": {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3",
		"app.kubernetes.io/instance": "disagg", "@" + manifest.PlacementAnnotation: clique + "=fabric.b"}}
	a, b := gb200Rack("a", 6), gb200Rack("b", 6)
	cluster := poolCluster{live, placement.Pool{Nodes: slices.Concat(a, b)}}
	_, err := runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:scaleOut": `{"graphs": 2, "cliques": ["fabric.b"]}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:scaleOut.cliques[0]: pins graph minimax-m3-disagg-gb200-agentic to clique nvidia.com/gpu.clique=fabric.b, where graph g2-minimax-m3-disagg-gb200-agentic runs")

	r, err := runWith(t, components.Options{Cluster: cluster}, "disagg", map[string]string{"minimax-m3:scaleOut": `{"graphs": 2, "cliques": ["", "fabric.b"]}`})
	require.NoError(t, err)
	graphs := graphsOf(t, r)
	assert.Equal(t, clique+"=fabric.a", decode[map[string]string](t, graphs["minimax-m3-disagg-gb200-agentic"], "metadata", "annotations")[manifest.PlacementAnnotation])
	assert.Equal(t, clique+"=fabric.b", decode[map[string]string](t, graphs["g2-minimax-m3-disagg-gb200-agentic"], "metadata", "annotations")[manifest.PlacementAnnotation])
}

// A drain is checked against the route's request timeout only where it drains: a timeout of 0
// (none) fits any drain, and a stack of one graph drains nothing.
func TestScaleOutDrainFitsARouteWithoutATimeoutAndOneGraph(t *testing.T) {
	for _, overrides := range []map[string]string{
		scaleOut("agg", 2, exposureOn(map[string]string{"requestTimeout": `"0s"`})),
		exposureOn(map[string]string{"requestTimeout": `"1m"`}),
	} {
		_, err := run(t, "agg", overrides)
		require.NoError(t, err)
	}
}
