package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"minimax-m3/manifest"
	"minimax-m3/tests/framework/rackbox"
)

// Scale-out in the box: a stack of two graphs on a pool of three racks partly used by another
// team. The real scheduler places the pods, the real Dynamo operator brings each graph to Ready and
// the real compute-domain-controller serves each graph's ComputeDomain; the route is checked as the
// API server stores it (no Gateway controller runs here).

// scaleOutPool adds three racks of one pool for a graph of gpus GPUs: a with room for a third of a
// graph (agg) or less, b with room for exactly one (the tightest fit), c with a tray to spare, and
// returns b and c.
func scaleOutPool(t *testing.T, pool string, gpus int) (b, c rackbox.Rack) {
	t.Helper()
	trays := gpus / 4
	racks := addPool(t, pool,
		rackbox.NVL72(pool+"-a").WithGPUs(gpus),
		rackbox.NVL72(pool+"-b").WithGPUs(gpus+4),
		rackbox.NVL72(pool+"-c").WithGPUs(gpus+8))
	occupy(t, "team-b-"+pool, append(append(racks[0].NodeNames()[:trays/2+1], racks[1].NodeNames()[0]), racks[2].NodeNames()[0])...)
	return racks[1], racks[2]
}

// scaleOutStack is a pool stack of two graphs routed through the box's site Gateway.
func scaleOutStack(t *testing.T, stack, ns, pool string, extra auto.ConfigMap) *testStack {
	t.Helper()
	cfg := auto.ConfigMap{
		"minimax-m3:scaleOut.graphs":            {Value: "2"},
		"minimax-m3:exposure.enabled":           {Value: "true"},
		"minimax-m3:exposure.gateway.namespace": {Value: boxGatewayNamespace}, "minimax-m3:exposure.gateway.name": {Value: "inference"},
		"minimax-m3:exposure.gateway.sectionName": {Value: "https"}, "minimax-m3:exposure.hostname": {Value: ns + ".box.example"},
		"minimax-m3:readiness.timeout": {Value: "2h"},
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return newPoolStack(t, stack, ns, pool, cfg)
}

// assertEachGraphWholeInItsRack checks that every worker of each graph runs in the graph's rack, on
// the graph's pin, claiming the graph's own channel.
func assertEachGraphWholeInItsRack(t *testing.T, ns string, racks map[string]rackbox.Rack, workers int) {
	t.Helper()
	for graph, r := range racks {
		nodes := workerNodes(t, ns, graph)
		assert.Len(t, nodes, workers, graph)
		for pod, node := range nodes {
			assert.Contains(t, r.NodeNames(), node, "%s's worker %s is in its clique", graph, pod)
		}
		assert.Equal(t, rackbox.CliqueLabel+"="+r.Clique(), boxGraph(t, ns, graph).GetAnnotations()[manifest.PlacementAnnotation], graph)
		for _, p := range podsOf(t, ns, client.MatchingLabels{graphLabelKey: graph}) {
			if p.Labels[manifest.ComponentLabel] == manifest.FrontendName {
				continue
			}
			require.Len(t, p.Spec.ResourceClaims, 1, p.Name)
			assert.Equal(t, graph+"-cd-channel", *p.Spec.ResourceClaims[0].ResourceClaimTemplateName, "%s claims its own graph's channel", p.Name)
		}
	}
}

// assertOneEntryPoint checks the route to both frontends, each with its share, and that each
// frontend's Service (the operator's) has its Ready frontend as an endpoint (the real EndpointSlice
// controller's).
func assertOneEntryPoint(t *testing.T, ns, first string) {
	t.Helper()
	second := "g2-" + first
	route := mustGetOn(t, box.Client, manifest.HTTPRoutes.GroupVersion().WithKind("HTTPRoute"), ns, first)
	var spec gatewayv1.HTTPRouteSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(route.Object["spec"].(map[string]any), &spec))
	var backends []string
	for _, ref := range spec.Rules[0].BackendRefs {
		require.NotNil(t, ref.Weight)
		backends = append(backends, fmt.Sprintf("%s=%d", ref.Name, *ref.Weight))
	}
	assert.Equal(t, []string{first + "-frontend=1", second + "-frontend=1"}, backends, "one route, both frontends")
	for _, graph := range []string{first, second} {
		eventually(t, 2*time.Minute, graph+"'s frontend Service has its frontend as a Ready endpoint", func(ctx context.Context) (bool, error) {
			var list discoveryv1.EndpointSliceList
			if err := box.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: graph + "-frontend"}); err != nil {
				return false, err
			}
			pods, err := listPods(ctx, ns, client.MatchingLabels{graphLabelKey: graph, manifest.ComponentLabel: manifest.FrontendName})
			if err != nil || len(pods) == 0 {
				return false, err
			}
			for _, s := range list.Items {
				for _, e := range s.Endpoints {
					if e.TargetRef != nil && e.TargetRef.Name == pods[0].Name && e.Conditions.Ready != nil && *e.Conditions.Ready {
						return true, nil
					}
				}
			}
			return false, nil
		})
	}
}

func TestBoxScaleOutDisaggTwoGraphsInTwoCliquesBehindOneRoute(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	b, c := scaleOutPool(t, "scale-disagg", 24)
	const ns = "box-scaleout-disagg"
	s := scaleOutStack(t, "disagg", ns, "scale-disagg", nil)
	upOK(t, s)
	assert.Contains(t, s.log.String(), "placement: graph "+disaggGraph+"'s 6 workers go to clique "+rackbox.CliqueLabel+"="+b.Clique())
	assert.Contains(t, s.log.String(), "placement: graph g2-"+disaggGraph+"'s 6 workers go to clique "+rackbox.CliqueLabel+"="+c.Clique())
	assertEachGraphWholeInItsRack(t, ns, map[string]rackbox.Rack{disaggGraph: b, "g2-" + disaggGraph: c}, 6)
	assertOneEntryPoint(t, ns, disaggGraph)
	for _, g := range []string{disaggGraph, "g2-" + disaggGraph} {
		assert.True(t, operatorReady(boxGraph(t, ns, g)), g)
	}

	// A third graph has no clique: a has room for two of its six workers, b and c hold the other
	// two graphs. Refused at preview with the table, nothing changed.
	generation := boxGraph(t, ns, disaggGraph).GetGeneration()
	s.set(ctx, "minimax-m3:scaleOut.graphs", "3")
	_, err := s.preview(ctx)
	require.Error(t, err)
	out := s.log.String() + err.Error()
	assert.Contains(t, out, "minimax-m3:scaleOut.graphs: scaleOut.graphs is 3, one clique each, and no clique the stack's other graphs do not hold has room for graph g3-"+disaggGraph+"'s 6 workers")
	assert.Contains(t, out, "the pool holds 2 such graph(s)")
	assert.Regexp(t, b.Clique()+`\s+\d+\s+\d+\s+\d of 6 workers  \(graph `+disaggGraph+`'s\)`, out)
	assert.Equal(t, generation, boxGraph(t, ns, disaggGraph).GetGeneration(), "nothing was changed")
	_, exists := getOn(t, box.Client, graphGVK, ns, "g3-"+disaggGraph)
	assert.False(t, exists)
}

// graphSnapshot is one look at a graph: its generation, whether the operator reports it Ready at
// that generation, and its weight in the stack's route (-1: not in it).
type graphSnapshot struct {
	name       string
	generation int64
	ready      bool
	weight     int64
	// look numbers the look it was seen in: the graphs of one look are listed by name, not in
	// the order their states came about.
	look int
}

// watchGraphs looks at the route and then at the namespace's graphs every 100 ms until stop is
// called, and returns what it saw, in order. The route is read first: a weight it shows was set
// before the graphs' state that follows it (the program sets a weight of 1 only on a Ready graph,
// and changes a graph only scaleOut.drain after its weight went to 0). It runs off the test
// goroutine and never fails the test: a failed read is skipped.
func watchGraphs(ns, route string) (stop func() []graphSnapshot) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu    sync.Mutex
		seen  []graphSnapshot
		wg    sync.WaitGroup
		looks int
	)
	look := func(ctx context.Context) {
		weights := map[string]int64{}
		var rt unstructured.Unstructured
		rt.SetGroupVersionKind(manifest.HTTPRoutes.GroupVersion().WithKind("HTTPRoute"))
		if err := box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: route}, &rt); err != nil {
			return
		}
		var spec gatewayv1.HTTPRouteSpec
		if m, ok := rt.Object["spec"].(map[string]any); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec) == nil {
			for _, rule := range spec.Rules {
				for _, ref := range rule.BackendRefs {
					w := int64(1)
					if ref.Weight != nil {
						w = int64(*ref.Weight)
					}
					weights[strings.TrimSuffix(string(ref.Name), "-frontend")] = w
				}
			}
		}
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(graphGVK.GroupVersion().WithKind("DynamoGraphDeploymentList"))
		if err := box.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		looks++
		for i := range list.Items {
			g := &list.Items[i]
			w, ok := weights[g.GetName()]
			if !ok {
				w = -1
			}
			seen = append(seen, graphSnapshot{name: g.GetName(), generation: g.GetGeneration(), ready: operatorReady(g), weight: w, look: looks})
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			look(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		// One last look once the operation has ended.
		look(context.Background())
	}()
	return func() []graphSnapshot {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// firstSeen is the index of the first snapshot that matches, -1 when none does.
func firstSeen(seen []graphSnapshot, match func(graphSnapshot) bool) int {
	return slices.IndexFunc(seen, match)
}

// lastWeights are each graph's weight as last seen.
func lastWeights(seen []graphSnapshot) map[string]int64 {
	out := map[string]int64{}
	for _, g := range seen {
		out[g.name] = g.weight
	}
	return out
}

// assertNeverServingWhileChanging checks that no snapshot shows a graph with a weight above 0
// while it is not Ready at its generation (mid-change, or broken).
func assertNeverServingWhileChanging(t *testing.T, seen []graphSnapshot) {
	t.Helper()
	for i, g := range seen {
		if g.weight > 0 && !g.ready {
			t.Errorf("snapshot %d: graph %s has weight %d in the route at generation %d, not Ready", i, g.name, g.weight, g.generation)
		}
	}
}

// A change of the workers reaches the graphs one at a time: graph 2 is changed only once graph 1
// is Ready at its new generation. A change that breaks graph 1 (its workers OOM-killed on start)
// ends `up` naming graph 1, and graph 2 is never touched: it keeps its generation and stays Ready.
// Reverting the change restores graph 1.
func TestBoxScaleOutAggChangesGraphByGraphAndStopsAtTheFirstItBreaks(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	b, c := scaleOutPool(t, "scale-agg", 12)
	const ns = "box-scaleout-agg"
	first, second := aggGraph, "g2-"+aggGraph
	s := scaleOutStack(t, "agg", ns, "scale-agg", auto.ConfigMap{"minimax-m3:scaleOut.drain": {Value: "5s"}})
	upOK(t, s)
	assertEachGraphWholeInItsRack(t, ns, map[string]rackbox.Rack{first: b, second: c}, 3)
	assertOneEntryPoint(t, ns, first)

	// 1. A flag change, graph by graph: the preview shows the plan, the up takes each graph out of
	// the route, drains it, changes it, waits for Ready and its smoke test, and puts it back.
	gen1, gen2 := boxGraph(t, ns, first).GetGeneration(), boxGraph(t, ns, second).GetGeneration()
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "48")
	_, err := s.preview(ctx)
	require.NoError(t, err, s.log.String())
	for _, g := range []string{first, second} {
		assert.Contains(t, s.log.String(), "rollout: graph "+g+": weight 0 in HTTPRoute "+ns+"/"+first+", 5s for its streams (scaleOut.drain), the change (rolls Worker), Ready, its smoke test, weight 1")
	}
	stop := watchGraphs(ns, first)
	upOK(t, s)
	seen := stop()
	firstOut := firstSeen(seen, func(g graphSnapshot) bool { return g.name == first && g.weight == 0 })
	firstChanged := firstSeen(seen, func(g graphSnapshot) bool { return g.name == first && g.generation > gen1 })
	firstBack := firstSeen(seen, func(g graphSnapshot) bool { return g.name == first && g.generation > gen1 && g.weight == 1 })
	secondOut := firstSeen(seen, func(g graphSnapshot) bool { return g.name == second && g.weight == 0 })
	secondChanged := firstSeen(seen, func(g graphSnapshot) bool { return g.name == second && g.generation > gen2 })
	for what, i := range map[string]int{"graph 1 out of the route": firstOut, "graph 1 changed": firstChanged, "graph 1 back": firstBack, "graph 2 out": secondOut, "graph 2 changed": secondChanged} {
		require.GreaterOrEqual(t, i, 0, "%s was seen", what)
	}
	// By look: graph 1 back and graph 2 out may come about between two looks (one follows the
	// other at once), and then show in one; the drain keeps each graph out for 5 s before it changes.
	out1, changed1, back1, out2, changed2 := seen[firstOut].look, seen[firstChanged].look, seen[firstBack].look, seen[secondOut].look, seen[secondChanged].look
	assert.True(t, out1 < changed1 && changed1 < back1 && back1 <= out2 && out2 < changed2,
		"out, changed and back, graph 1 before graph 2 (looks %d %d %d %d %d)", out1, changed1, back1, out2, changed2)
	assertNeverServingWhileChanging(t, seen)
	assert.Equal(t, map[string]int64{first: 1, second: 1}, lastWeights(seen), "both graphs are back in the route")
	assertRouteReleased(t, ns, first)
	assertEachGraphWholeInItsRack(t, ns, map[string]rackbox.Rack{first: b, second: c}, 3)

	// 2. A change whose workers are OOM-killed on start: up ends naming graph 1; graph 2 keeps its
	// generation and its Ready through the whole update.
	gen1, gen2 = boxGraph(t, ns, first).GetGeneration(), boxGraph(t, ns, second).GetGeneration()
	s.set(ctx, troubleKey("worker"), rackbox.TroubleOOMKilled)
	stop = watchGraphs(ns, first)
	err = stuckUp(t, s, 6*time.Minute)
	seen = stop()
	assertNeverServingWhileChanging(t, seen)
	assert.Contains(t, err.Error(), "DynamoGraphDeployment "+ns+"/"+first+" cannot become Ready without a change")
	assert.Contains(t, err.Error(), "OOMKilled")
	assert.NotContains(t, err.Error(), ns+"/"+second+" ")
	assert.Equal(t, -1, firstSeen(seen, func(g graphSnapshot) bool {
		return g.name == second && (g.generation != gen2 || !g.ready || g.weight != 1)
	}),
		"graph 2 was never changed nor seen not Ready, and kept its weight")
	assert.Greater(t, boxGraph(t, ns, first).GetGeneration(), gen1, "graph 1 took the change")
	assert.Equal(t, map[string]int64{first: 0, second: 1}, lastWeights(seen), "the broken graph 1 stays out of the route, graph 2 serves it")

	// 3. Reverted: graph 1 is Ready again and back in the route, graph 2 untouched.
	require.NoError(t, s.stack.RemoveConfigWithOptions(ctx, troubleKey("worker"), &auto.ConfigOptions{Path: true}))
	stop = watchGraphs(ns, first)
	upOK(t, s)
	seen = stop()
	assertNeverServingWhileChanging(t, seen)
	assert.Equal(t, map[string]int64{first: 1, second: 1}, lastWeights(seen), "both graphs serve the route")
	assertRouteReleased(t, ns, first)

	// 4. The route is the stack's again: a change of it applies without a field-manager conflict.
	s.set(ctx, "minimax-m3:exposure.requestTimeout", "1h")
	upOK(t, s)
	route := mustGetOn(t, box.Client, manifest.HTTPRoutes.GroupVersion().WithKind("HTTPRoute"), ns, first)
	rules, _, _ := unstructured.NestedSlice(route.Object, "spec", "rules")
	require.Len(t, rules, 1)
	timeout, _, _ := unstructured.NestedString(rules[0].(map[string]any), "timeouts", "request")
	assert.Equal(t, "1h", timeout)
	assert.True(t, operatorReady(boxGraph(t, ns, first)))
	assert.Equal(t, gen2, boxGraph(t, ns, second).GetGeneration(), "graph 2 never changed")
	assertEachGraphWholeInItsRack(t, ns, map[string]rackbox.Rack{first: b, second: c}, 3)
}

// assertRouteReleased checks that the rollout's field manager is gone from the route's managed
// fields once every graph is back in it: the provider's next apply of the route meets no conflict.
func assertRouteReleased(t *testing.T, ns, route string) {
	t.Helper()
	rt := mustGetOn(t, box.Client, manifest.HTTPRoutes.GroupVersion().WithKind("HTTPRoute"), ns, route)
	for _, m := range rt.GetManagedFields() {
		assert.NotEqual(t, "minimax-m3-rollout", m.Manager, "the rollout still holds fields of HTTPRoute %s/%s", ns, route)
	}
}
