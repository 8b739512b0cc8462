package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
	"minimax-m3/manifest"
	"minimax-m3/placement"
)

// PoolReader reads the cluster's nodes and the pods that hold their resources, for placement.
type PoolReader interface {
	Pool(ctx context.Context) (placement.Pool, error)
}

// PlacementError is a graph the pool has no room for: nothing was created or changed.
type PlacementError struct {
	// Key is the config key to change (without the namespace).
	Key     string
	Message string
	Result  placement.Result
}

func (e *PlacementError) Error() string {
	return fmt.Sprintf("%s: %s; nothing was changed (placement.check=false skips this check):\n%s", config.Key(e.Key), e.Message, e.Result.Table())
}

// placeGraphs decides where each of the stack's graphs goes (config.Config.Graph), before anything
// is created or changed: it reads the pool's nodes and pods once, and places the graphs that carry a
// pin (scaleOut.cliques, placement.clique, or the clique a running graph was placed in) first, so
// that a new graph never takes a clique another graph of the stack holds; each graph goes to a
// clique of its own (place). runtimeClass is the workers' decided RuntimeClass.
func placeGraphs(ctx context.Context, log Log, reader ObjectReader, c *config.Config, meta Ownership, previousStack Previous, runtimeClass string) ([]manifest.Decisions, error) {
	graphs := c.Graphs()
	out := make([]manifest.Decisions, len(graphs))
	// taken maps a clique to the graph of the stack pinned to it: the user's pins first, then the
	// running graphs'.
	taken := map[string]string{}
	pinKeys := map[string]string{} // clique -> the key that pins a graph to it
	var ps config.Problems
	for i, g := range graphs {
		out[i] = manifest.Decisions{WorkerRuntimeClass: runtimeClass}
		if clique := g.Placement.Clique; clique != "" {
			out[i].Clique = clique
			taken[clique] = g.GraphName
			pinKeys[clique] = graphPlacement{index: i, graphs: len(graphs)}.pinKey()
		}
	}
	for i, g := range graphs {
		if out[i].Clique != "" {
			continue
		}
		clique := pinOf(g, meta.LiveGraph(g.GraphName))
		if clique == "" {
			continue
		}
		if other, ok := taken[clique]; ok {
			// The user pinned another graph to the clique this one runs in: two graphs would
			// share it.
			ps.Add(pinKeys[clique], "pins graph %s to clique %s=%s, where graph %s runs: each graph needs a clique of its own (move graph %s first, or pin another clique)",
				other, g.Placement.TopologyKey, clique, g.GraphName, g.GraphName)
			continue
		}
		out[i].Clique = clique
		taken[clique] = g.GraphName
	}
	if len(ps) > 0 {
		return nil, ps
	}
	pr, ok := reader.(PoolReader)
	if !c.Placement.Check || !ok {
		return out, nil
	}
	pool, err := pr.Pool(ctx)
	if err != nil && c.Kubernetes.RequireRead {
		var ps config.Problems
		ps.Add("placement.check", "the pool's nodes and pods cannot be read, and kubernetes.requireRead will not let the scheduler alone place the graph: %v (turn placement.check off to let it)", err)
		return nil, ps
	}
	if err != nil {
		msg := "not checking where the graph's workers fit (the scheduler alone places them): " + err.Error()
		if c.ScaledOut() {
			msg += "; a new graph is not pinned, and may share a clique with another graph of the stack"
		}
		log.Warn(msg)
		return out, nil
	}
	placements := make([]graphPlacement, len(graphs))
	for i, g := range graphs {
		previous := Previous{}
		if previousStack.GraphName != "" {
			// The graphs the stack deployed under an earlier graphName, which a new one deletes
			// first: their GPUs are the new graphs' to use.
			previous = Previous{Namespace: previousStack.Namespace, GraphName: config.GraphNameFor(previousStack.GraphName, i)}
		}
		placements[i] = graphPlacement{config: g, index: i, graphs: len(graphs), live: meta.LiveGraph(g.GraphName), previousStack: previous, runtimeClass: runtimeClass}
		if out[i].Clique == "" && meta.LiveGraph(g.GraphName) != nil {
			// A running graph created unpinned stays where its workers are: no other graph goes
			// there.
			if clique := previousClique(g.Placement.TopologyKey, pool, placements[i].own()); clique != "" {
				if other, ok := taken[clique]; ok {
					log.Warn(fmt.Sprintf("placement: graph %s runs unpinned in clique %s=%s, which graph %s holds too: pin one of them elsewhere (%s)",
						g.GraphName, g.Placement.TopologyKey, clique, other, placements[i].pinKey()))
				} else {
					taken[clique] = g.GraphName
				}
			}
		}
	}
	// The graphs that carry a pin first, so that a new graph never takes their clique.
	order := make([]int, 0, len(graphs))
	for i := range graphs {
		if out[i].Clique != "" {
			order = append(order, i)
		}
	}
	for i := range graphs {
		if out[i].Clique == "" {
			order = append(order, i)
		}
	}
	for _, i := range order {
		gp := placements[i]
		gp.taken = map[string]string{}
		for clique, name := range taken {
			if name != gp.config.GraphName {
				gp.taken[clique] = name
			}
		}
		clique, err := place(log, pool, gp)
		if err != nil {
			return nil, err
		}
		out[i].Clique = clique
		if clique != "" {
			taken[clique] = gp.config.GraphName
		}
	}
	return out, nil
}

// pinOf is the clique a graph is pinned to before the pool is read: the user's pin, else the one
// the running graph (live, its annotations) records; "" when neither.
func pinOf(g *config.Config, live map[string]string) string {
	if g.Placement.Clique != "" {
		return g.Placement.Clique
	}
	if pin, ok := strings.CutPrefix(live[manifest.PlacementAnnotation], g.Placement.TopologyKey+"="); ok && g.Placement.TopologyKey != "" {
		return pin
	}
	return ""
}

// place decides where one graph's workers go (g is the graph's config, live its running object's
// annotations or nil): it fits the workers into each NVLink clique (placement.topologyKey) of the
// pool as the scheduler's filters would, and pins a new graph to one with room through a node
// affinity, recorded on the graph (manifest.PlacementAnnotation): the tightest fit, among the
// cliques no other graph of the stack holds (taken: clique to graph). A graph that carries a pin
// keeps it, whatever else happens (a change never moves a running graph); a live graph without one
// (deployed before placement existed, or adopted) is not pinned, which would restart every worker.
// With no clique that holds them all it refuses with a table of the cliques, unless the update
// leaves the workers where they are. Without a topology key it checks that the pool holds the
// workers at all.
func place(log Log, pool placement.Pool, gp graphPlacement) (string, error) {
	g, live, runtimeClass := gp.config, gp.live, gp.runtimeClass
	key := g.Placement.TopologyKey
	pinnedByUser := g.Placement.Clique != ""
	// The clique the workers are pinned to: the user's, else the running graph's pin, else the
	// one chosen below for a new graph.
	clique := g.Placement.Clique
	pin, pinned := strings.CutPrefix(live[manifest.PlacementAnnotation], key+"=")
	if pinned && key != "" && !pinnedByUser {
		clique = pin
	}
	who := "the graph"
	if gp.graphs > 1 {
		who = "graph " + g.GraphName
	}
	// The workers as they would be placed anew, without the pin: Previous confines the choice to
	// the pinned clique, and a refusal then shows every clique to move to.
	unpinned := *g
	unpinned.Placement.Clique = ""
	workers, err := graphWorkers(&unpinned, runtimeClass)
	if err != nil {
		return "", err
	}
	own := gp.own()
	previous := clique // set by the user, or the graph's pin: the one clique it may use
	if previous == "" {
		previous = previousClique(key, pool, own)
	}
	res := placement.Place(pool, placement.Request{TopologyKey: key, Workers: workers, Own: own, Previous: previous, Taken: gp.taken})
	if res.Empty() {
		// No node the workers may use exists (yet): a pool scaled to zero that an autoscaler
		// grows for Pending pods, or a cluster without GPU nodes. Nothing to choose from.
		log.Warn(fmt.Sprintf("placement: no node %s's workers may use exists (their node selector, affinity and tolerations match none): "+
			"the scheduler places them when nodes appear (%s)", who, strings.TrimSpace(strings.ReplaceAll(res.Table(), "\n", "; "))))
		return clique, nil
	}
	if n := res.Excluded[placement.ExcludedNoKey]; n > 0 {
		log.Warn(fmt.Sprintf("%d node(s) the workers may use carry no %s label and are left out: GPU feature discovery labels a tray with its clique once the fabric manager has initialised it", n, key))
	}
	unpinnedLive := live != nil && !pinned && !pinnedByUser
	if res.Fits() {
		where := "the pool"
		if key != "" {
			where = fmt.Sprintf("clique %s=%s", key, res.Chosen)
			if clique == "" && !unpinnedLive {
				clique = res.Chosen
			}
		}
		d, _ := res.Domain(res.Chosen)
		log.Info(fmt.Sprintf("placement: %s's %d workers go to %s (%d trays, %d free GPUs)", who, len(workers), where, d.Trays, d.FreeGPUs))
		if unpinnedLive && key != "" {
			log.Info(fmt.Sprintf("placement: the running %s is not pinned to a clique (it was created unpinned: adopted, deployed before "+
				"placement or with the check off); set %s=%s to pin it (every worker restarts once)", strings.TrimPrefix(who, "the "), gp.pinKey(), res.Chosen))
		}
		return clique, nil
	}
	why := ""
	if live != nil {
		why = workersMove(g, gp.pinKey(), manifest.Decisions{Clique: clique, WorkerRuntimeClass: runtimeClass}, live, pin, pool, own)
	}
	if live != nil && why == "" {
		// The update leaves every worker where it runs (no worker template or count changes):
		// the pool's state (a drained tray, another team's growth) is no reason to refuse it.
		log.Warn("placement: the pool has no room for " + who + "'s workers as they would be placed anew, but this update moves none of them:\n" + res.Table())
		return clique, nil
	}
	return "", refusal(gp, res, previous, pinnedByUser, workers, why)
}

// graphPlacement is one graph to place.
type graphPlacement struct {
	// config is the graph's (config.Config.Graph); index its number from 0, of graphs.
	config        *config.Config
	index, graphs int
	// live is the running graph's annotations (nil: none yet).
	live map[string]string
	// previousStack names the graph of the same number the stack deployed under an earlier
	// graphName ("" when none).
	previousStack Previous
	runtimeClass  string
	// taken maps each clique another graph of the stack holds to that graph.
	taken map[string]string
}

// own says whether a pod is one of the graph's workers, or of the graph the stack deployed under
// an earlier name, which a new graphName deletes first: their GPUs are the graph's to use.
func (gp graphPlacement) own() func(*corev1.Pod) bool {
	g := gp.config
	var roles []string
	for _, r := range g.Workers() {
		roles = append(roles, r.Name)
	}
	return func(p *corev1.Pod) bool {
		if !slices.Contains(roles, p.Labels[manifest.ComponentLabel]) {
			return false
		}
		name := p.Labels[cluster.GraphLabel]
		return p.Namespace == g.Namespace.Name && name == g.GraphName ||
			gp.previousStack.GraphName != "" && p.Namespace == gp.previousStack.Namespace && name == gp.previousStack.GraphName
	}
}

// pinKey is the key that pins the graph: placement.clique for a stack of one graph, else its entry
// of scaleOut.cliques.
func (gp graphPlacement) pinKey() string {
	if gp.graphs <= 1 {
		return "placement.clique"
	}
	return fmt.Sprintf("scaleOut.cliques[%d]", gp.index)
}

// workersMove says why the update places worker pods anew ("" when it does not): a worker role's
// pod template changes (the operator rolls it), or the graph needs more workers than it has
// running. The reason names the keys that do it, for a refusal under another key.
func workersMove(c *config.Config, pinKey string, d manifest.Decisions, live map[string]string, livePin string, pool placement.Pool, own func(*corev1.Pod) bool) string {
	planned, err := manifest.TemplateDigests(c, d)
	if err != nil {
		return "this update may change the workers' pod templates"
	}
	// The templates as they would be with the graph's pin kept: when they match the live ones,
	// the new pin alone rolls the workers.
	kept := *c
	kept.Placement.Clique = livePin
	keptDigests, err := manifest.TemplateDigests(&kept, manifest.Decisions{WorkerRuntimeClass: d.WorkerRuntimeClass})
	if err != nil {
		keptDigests = planned
	}
	for _, r := range c.Workers() {
		k := manifest.TemplateAnnotationPrefix + r.Name
		switch {
		case live[k] == "":
			return fmt.Sprintf("this update may roll the %s pods (the running graph records no digest of their template)", r.Name)
		case live[k] == planned[k]:
		case d.Clique != livePin && live[k] == keptDigests[k]:
			return fmt.Sprintf("%s moves the %s pods from clique %q to %q (every worker restarts)", pinKey, r.Name, livePin, d.Clique)
		default:
			return fmt.Sprintf("this update rolls the %s pods (their template changes: a %s.* key, or one the workers share such as image, model, kvCache or speculative)", r.Name, r.Key)
		}
	}
	// Per role, the pods the graph has (a drained worker's Pending replacement included): more
	// replicas than that are new pods to place.
	have := map[string]int{}
	for i := range pool.Pods {
		if p := &pool.Pods[i]; own(p) && p.DeletionTimestamp == nil {
			have[p.Labels[manifest.ComponentLabel]]++
		}
	}
	for _, r := range c.Workers() {
		if !r.Config.ScalingAdapter && have[r.Name] < r.Config.Replicas {
			return fmt.Sprintf("this update adds %s pods (%s.replicas is %d, %d run)", r.Name, r.Key, r.Config.Replicas, have[r.Name])
		}
	}
	return ""
}

// refusal says why no clique takes the graph, under the key that changes it; why is what in the
// update places workers anew (workersMove), which is often the key the user just changed.
func refusal(gp graphPlacement, res placement.Result, previous string, pinnedByUser bool, workers []placement.Worker, why string) error {
	c := gp.config
	key := c.Placement.TopologyKey
	e := &PlacementError{Key: "placement.topologyKey", Result: res}
	need := demand(workers)
	the := "the graph"
	if gp.graphs > 1 {
		the = "graph " + c.GraphName
	}
	switch {
	case pinnedByUser:
		d, _ := res.Domain(c.Placement.Clique)
		e.Key = gp.pinKey()
		e.Message = fmt.Sprintf("clique %s=%s holds %d of %s's %d workers (%s)", key, c.Placement.Clique, d.Holds, the, len(workers), need)
	case previous != "":
		d, _ := res.Domain(previous)
		e.Key = gp.pinKey()
		e.Message = fmt.Sprintf("%s runs in clique %s=%s, which holds %d of its %d workers (%s)", the, key, previous, d.Holds, len(workers), need)
		if trays := res.Trays(previous); len(trays) > 0 {
			var out []string
			for _, t := range trays {
				out = append(out, t.Node+" "+t.State)
			}
			e.Message += fmt.Sprintf(" with its trays out of service: %s; wait for them to return, uncordon one (kubectl uncordon <node>) "+
				"or have its taint's owner lift it, move the graph with %s to a clique below that holds every worker "+
				"(every worker restarts), or shrink the graph (%s)", strings.Join(out, ", "), gp.pinKey(), replicaKeys(c))
		} else {
			e.Message += "; free room there, or set " + gp.pinKey() + " to a clique below that holds them all to move the graph (every worker restarts)"
		}
	case len(res.Domains) == 0 && res.Excluded[placement.ExcludedTooSmall] > 0 && res.Excluded[placement.ExcludedNoKey] == 0:
		e.Key = "placement.check"
		e.Message = fmt.Sprintf("no GPU node the workers may use could hold one of them even empty (%s): does the pool offer every resource they request (an RDMA device, say)?", need)
	case key != "" && len(res.Domains) == 0 && res.Excluded[placement.ExcludedNoKey] > 0:
		e.Message = fmt.Sprintf("no node the workers may use carries the label %s: is GPU feature discovery running, and the trays' fabric manager initialised? "+
			"Set placement.topologyKey to the pool's clique label", key)
	case key != "" && gp.graphs > 1 && gp.live == nil && len(res.Holding(len(workers))) > 0:
		e.Key = "scaleOut.graphs"
		fit := res.Holding(len(workers))
		e.Message = fmt.Sprintf("scaleOut.graphs is %d, one clique each, and no clique the stack's other graphs do not hold has room for graph %s's %d workers (%s) among the nodes they may use: "+
			"the pool holds %d such graph(s) (%s); free room, or set scaleOut.graphs to at most %d", gp.graphs, c.GraphName, len(workers), need, len(fit), strings.Join(fit, ", "), len(fit))
	case key != "":
		e.Message = fmt.Sprintf("no NVLink clique has room for %s's %d workers (%s) among the nodes they may use", the, len(workers), need)
	default:
		e.Key = "placement.check"
		e.Message = fmt.Sprintf("the nodes the workers may use have no room for %s's %d workers (%s)", the, len(workers), need)
	}
	if why != "" {
		// The other key: what the user changed, which is often not the key refused.
		e.Message += "; refused now because " + why
	}
	return e
}

// replicaKeys are the worker roles' replica keys, for a refusal's choices.
func replicaKeys(c *config.Config) string {
	var keys []string
	for _, r := range c.Workers() {
		keys = append(keys, r.Key+".replicas")
	}
	return strings.Join(keys, ", ")
}

// demand says what the workers request, for messages: "4 nvidia.com/gpu each".
func demand(workers []placement.Worker) string {
	var each []string
	for _, w := range workers {
		gpus := int64(0)
		for _, ctr := range w.Spec.Containers {
			q := ctr.Resources.Requests[placement.GPU]
			gpus += q.Value()
		}
		s := fmt.Sprintf("%s %d %s", w.Role, gpus, placement.GPU)
		if !slices.Contains(each, s) {
			each = append(each, s)
		}
	}
	return strings.Join(each, ", ") + " each"
}

// graphWorkers are the graph's worker pods as the scheduler sees their specs, one per replica.
func graphWorkers(c *config.Config, runtimeClass string) ([]placement.Worker, error) {
	gs, err := manifest.GraphSpec(c, manifest.Decisions{WorkerRuntimeClass: runtimeClass})
	if err != nil {
		return nil, err
	}
	var out []placement.Worker
	for _, r := range c.Workers() {
		for _, comp := range gs.Components {
			if comp.Name != r.Name {
				continue
			}
			for range comp.Replicas {
				out = append(out, placement.Worker{Role: comp.Name, Spec: comp.PodTemplate.Spec})
			}
		}
	}
	return out, nil
}

// previousClique is the clique all the graph's bound workers are on (a graph adopted, or placed
// before the placement annotation), "" when they are on none or several.
func previousClique(key string, pool placement.Pool, worker func(*corev1.Pod) bool) string {
	if key == "" {
		return ""
	}
	nodes := map[string]string{}
	for _, n := range pool.Nodes {
		nodes[n.Name] = n.Labels[key]
	}
	found := ""
	for i := range pool.Pods {
		p := &pool.Pods[i]
		if !worker(p) || p.Spec.NodeName == "" {
			continue
		}
		v := nodes[p.Spec.NodeName]
		if v == "" || (found != "" && v != found) {
			return ""
		}
		found = v
	}
	return found
}
