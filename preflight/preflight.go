package preflight

import (
	"context"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// Log takes what the checks have to say that is not a refusal: a check skipped because the cluster
// could not be read, where the workers go. The program shows it on the stack.
type Log interface {
	Warn(msg string)
	Info(msg string)
}

// Stack is the stack the checks run for.
type Stack struct {
	// Name is the stack's name (the instance label of its objects); Identity is
	// organization/project/stack (their identity annotation).
	Name, Identity string
	// Previous is what the stack's last update exported.
	Previous Previous
}

// Previous is what a stack's last update exported ("" before the first).
type Previous struct {
	// Identity is the identity the stack's objects carry; it differs from Stack.Identity after
	// `pulumi stack rename`, which keeps the stack's state and outputs.
	Identity string
	// Namespace and GraphName name the graph it deployed: a new graphName replaces that graph,
	// whose workers' GPUs are then the new one's.
	Namespace, GraphName string
}

// Decisions are what the checks found and decided, for the components to build from: the config
// they read is never written.
type Decisions struct {
	// Ownership is what exists of the stack's objects, and which of them the stack adopts.
	Ownership Ownership
	// PodSecurity is the Pod Security level of the namespace the stack creates.
	PodSecurity string
	// Graphs are what changes each graph's objects (config.Config.Graph), in order: the clique its
	// workers are pinned to and the RuntimeClass of workers that name none.
	Graphs []manifest.Decisions
}

// Graph is what was decided for graph i (from 0); with nothing decided for it (no check ran), its
// workers take the decided RuntimeClass and no clique beyond the config's.
func (d Decisions) Graph(i int) manifest.Decisions {
	if i < len(d.Graphs) {
		return d.Graphs[i]
	}
	if len(d.Graphs) > 0 {
		return manifest.Decisions{WorkerRuntimeClass: d.Graphs[0].WorkerRuntimeClass}
	}
	return manifest.Decisions{}
}

// Check runs every check that needs the cluster, before anything is registered, and returns what
// they decided; a refusal is a config.Problems naming the keys. reader is nil when no cluster is
// read (a render, or a cluster that cannot be reached): then only what needs no cluster is decided.
// The checks, in order: the APIs the stack's objects need are served, no other route holds the
// hostname, the site's Gateway takes the route, no object the stack would create is another's
// (Ownership), the namespace's Pod Security level and the workers' RuntimeClass, and the clique each
// graph's workers go to (placement).
func Check(ctx context.Context, log Log, reader ObjectReader, c *config.Config, s Stack) (Decisions, error) {
	var d Decisions
	if reader == nil {
		level, class, err := resolvePodSecurity(ctx, log, nil, c, d.Ownership)
		d.PodSecurity = level
		for range c.GraphCount() {
			d.Graphs = append(d.Graphs, manifest.Decisions{WorkerRuntimeClass: class})
		}
		return d, err
	}
	if err := checkAPIs(ctx, log, reader, c); err != nil {
		return d, err
	}
	if err := checkRouteHostname(ctx, log, reader, c, s); err != nil {
		return d, err
	}
	if err := checkGateway(ctx, log, reader, c); err != nil {
		return d, err
	}
	var err error
	if d.Ownership, err = checkOwnership(ctx, log, reader, c, s); err != nil {
		return d, err
	}
	level, class, err := resolvePodSecurity(ctx, log, reader, c, d.Ownership)
	if err != nil {
		return d, err
	}
	d.PodSecurity = level
	if d.Graphs, err = placeGraphs(ctx, log, reader, c, d.Ownership, s.Previous, class); err != nil {
		return d, err
	}
	return d, nil
}

// Ownership is what the ownership check learned about the stack's objects.
type Ownership struct {
	// Previous is the identity the stack's last update wrote, when it is another one (the stack
	// was renamed since).
	Previous string
	// adopted are the objects (objectKey) the stack took over with adopt=true.
	adopted map[string]bool
	// liveGraphs holds each live graph's annotations, by name (none when there is no graph yet).
	liveGraphs map[string]map[string]string
}

func objectKey(kind, name string) string { return kind + "/" + name }

// Adopted reports whether the stack took the object over rather than created it.
func (o Ownership) Adopted(kind, name string) bool { return o.adopted[objectKey(kind, name)] }

// LiveGraph is the annotations of the live graph of that name, nil when there is no such graph yet.
func (o Ownership) LiveGraph(name string) map[string]string { return o.liveGraphs[name] }

// Unreadable is the refusal of kubernetes.requireRead when the cluster cannot be read.
func Unreadable(err error) error {
	var ps config.Problems
	ps.Add("kubernetes.requireRead", "the cluster cannot be read, so no check can say that nothing another stack, team or tool manages would be taken over: %v", err)
	return ps
}
