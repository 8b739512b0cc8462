package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ScaleOutConfig runs several graphs of the same config, each whole in an NVLink clique of its own
// with a ComputeDomain of its own, behind the stack's one route. The namespace, the token Secret,
// the model cache and its download are the stack's, shared by every graph (downloaded once).
type ScaleOutConfig struct {
	// Graphs is how many graphs the stack runs (1 to MaxGraphs). Graph 1 keeps graphName and every
	// name derived from it, so 1 deploys exactly the objects a stack without scale-out does, and
	// growing from 1 leaves the running graph as it is; graph n (n ≥ 2) is `g<n>-<graphName>`.
	// More than one needs placement.topologyKey: each graph goes to a clique of its own.
	Graphs int `json:"graphs"`
	// Cliques pins graph n to the n-th value of placement.topologyKey (a list no longer than
	// graphs, each clique once); a graph without an entry, or with "", is placed as placement.check
	// chooses, and then kept where it runs. Changing a graph's entry moves it (its workers restart).
	Cliques []string `json:"cliques"`
	// Drain is how long a graph is out of the route before a change rolls its pods, for the
	// streams it serves to finish (a duration): an update of running graphs sets the graph's route
	// weight to 0, waits this long, applies the change, waits for Ready and the smoke test, and sets
	// the weight back, graph by graph. A stream longer than this (up to exposure.requestTimeout) is
	// cut when its pod restarts. Without exposure nothing is drained.
	Drain string `json:"drain"`

	// stack is the stack's graphName in a graph's config (Graph): what the graphs share is named
	// after it.
	stack string
}

// MaxGraphs bounds scaleOut.graphs: the NVL72 racks one pool holds, with room to spare.
const MaxGraphs = 16

// GraphCount is how many graphs the stack runs (scaleOut.graphs, at least 1).
func (c *Config) GraphCount() int { return max(c.ScaleOut.Graphs, 1) }

// GraphNameOf is the name of graph i (0-based): graphName for the first, `g<i+1>-<graphName>` for
// the others.
func (c *Config) GraphNameOf(i int) string { return GraphNameFor(c.StackGraphName(), i) }

// GraphNameFor is the name graph i (0-based) of a stack whose graphName is base has. Graph n
// (n ≥ 2) puts its number in front: a frontend discovers the workers whose Dynamo namespace
// (`<namespace>-<graph>-<worker hash>`) starts with its own graph's (DYN_NAMESPACE_PREFIX, which
// the operator sets), so no graph's name may begin with another's.
func GraphNameFor(base string, i int) string {
	if i == 0 || base == "" {
		return base
	}
	return fmt.Sprintf("g%d-%s", i+1, base)
}

// Graph is the stack's config as graph i (0-based) is built from it: a copy with the graph's name,
// the names derived from it (its ConfigMap, ComputeDomain and channel, Services, budgets, policy,
// monitors), and its clique pin (scaleOut.cliques). Graph(0) of a stack with one graph is the
// config itself, name for name. The stack's config is never written.
func (c *Config) Graph(i int) *Config {
	g := *c
	g.ScaleOut.stack = c.StackGraphName()
	g.GraphName = c.GraphNameOf(i)
	if i > 0 {
		// A name the user gave a graph's own object is the first graph's; the others' carry their
		// number after it.
		if c.ComputeDomain.Name != "" {
			g.ComputeDomain.Name = fmt.Sprintf("%s-%d", c.ComputeDomain.Name, i+1)
		}
		if c.ComputeDomain.ChannelClaimTemplate != "" {
			g.ComputeDomain.ChannelClaimTemplate = fmt.Sprintf("%s-%d", c.ComputeDomain.ChannelClaimTemplate, i+1)
		}
	}
	if c.GraphCount() > 1 {
		g.Placement.Clique = ""
		if i < len(c.ScaleOut.Cliques) {
			g.Placement.Clique = c.ScaleOut.Cliques[i]
		}
	}
	return &g
}

// Graphs are the stack's graphs' configs, in order (Graph).
func (c *Config) Graphs() []*Config {
	out := make([]*Config, c.GraphCount())
	for i := range out {
		out[i] = c.Graph(i)
	}
	return out
}

// StackGraphName is the stack's graphName, in a graph's config as in the stack's.
func (c *Config) StackGraphName() string {
	if c.ScaleOut.stack != "" {
		return c.ScaleOut.stack
	}
	return c.GraphName
}

// ScaledOut reports whether the stack runs more than one graph.
func (c *Config) ScaledOut() bool { return c.GraphCount() > 1 }

func (s ScaleOutConfig) validate(v validator, key string, c *Config) {
	if s.Graphs < 1 || s.Graphs > MaxGraphs {
		v.add(key+".graphs", "is %d: it must be 1 to %d", s.Graphs, MaxGraphs)
		return
	}
	switch {
	case s.Graphs == 1 && len(s.Cliques) > 0:
		v.add(key+".cliques", "pins the graphs of a stack of several, and scaleOut.graphs is 1: pin its graph with placement.clique")
	case len(s.Cliques) > s.Graphs:
		v.add(key+".cliques", "pins %d graphs, but scaleOut.graphs is %d", len(s.Cliques), s.Graphs)
	}
	for i, clique := range s.Cliques {
		k := fmt.Sprintf("%s.cliques[%d]", key, i)
		v.errs(k, clique, "label value", validation.IsValidLabelValue(clique))
		if j := slices.Index(s.Cliques, clique); j < i && clique != "" {
			v.add(k, "is clique %q again (scaleOut.cliques[%d]): each graph needs a clique of its own", clique, j)
		}
	}
	v.duration(key+".drain", s.Drain)
	// A request timeout of 0 is none: any drain fits. A stack of one graph drains nothing.
	d, err := time.ParseDuration(s.Drain)
	limit, lerr := time.ParseDuration(c.Exposure.RequestTimeout)
	if err == nil && lerr == nil && limit > 0 && c.Exposure.Enabled && s.Graphs > 1 && d > limit {
		v.add(key+".drain", "is %s, longer than exposure.requestTimeout (%s), after which the route ends a request anyway: at most that", s.Drain, c.Exposure.RequestTimeout)
	}
	if s.Graphs == 1 {
		return
	}
	if c.Placement.TopologyKey == "" {
		v.add(key+".graphs", "is %d, which needs placement.topologyKey (%s on GB200): each graph goes to a clique of its own", s.Graphs, DefaultTopologyKey)
	}
	if c.Placement.Clique != "" {
		v.add("placement.clique", "pins one graph, and scaleOut.graphs is %d: pin each graph with scaleOut.cliques instead", s.Graphs)
	}
	if !c.ComputeDomain.Create {
		v.add("computeDomain.create", "is false, and scaleOut.graphs is %d: each graph needs a ComputeDomain of its own in its clique, which the stack creates", s.Graphs)
	}
	if pinned := len(slices.DeleteFunc(slices.Clone(s.Cliques), func(c string) bool { return c == "" })); !c.Placement.Check && pinned < s.Graphs {
		v.add("placement.check", "is false, and scaleOut.graphs is %d with %d pinned by scaleOut.cliques: without the check nothing keeps two graphs out of one clique; turn it on, or pin every graph", s.Graphs, pinned)
	}
	// The last graph's names are the longest: they must still be valid names.
	last := c.Graph(s.Graphs - 1)
	what := fmt.Sprintf("graph %d's ", s.Graphs)
	v.dns1035(key+".graphs", last.FrontendServiceName(), what+"frontend Service name %q (graphName with its number)")
	if c.Profile == Aggregated || c.Profile == Disaggregated {
		for _, r := range last.Workers() {
			v.dns1035(key+".graphs", last.WorkerServiceName(r), what+r.Name+" Service name %q the Dynamo operator derives from graphName with its number")
		}
	}
	if ns := last.DynamoNamespace(); c.Namespace.Name != "" && len(ns) > validation.LabelValueMaxLength {
		v.add(key+".graphs", "with graphName %q and namespace.name %q, graph %d's Dynamo namespace %q is %d characters, more than %d: shorten graphName or namespace.name",
			c.GraphName, c.Namespace.Name, s.Graphs, ns, len(ns), validation.LabelValueMaxLength)
	}
	if n := len(last.GraphName) + SmokeTestJobSuffixLength; c.SmokeTest.Enabled && n > validation.DNS1123LabelMaxLength {
		v.add(key+".graphs", "graph %d's smoke test Job name (its name %q + %d characters) would be %d characters, over Kubernetes' 63: shorten graphName or turn the smoke test off",
			s.Graphs, last.GraphName, SmokeTestJobSuffixLength, n)
	}
	// No graph's Dynamo namespace may begin with another's: its frontend would take the other's
	// workers for its own (a graphName that is "g" and graph 2's "g2-g", say).
	graphs := c.Graphs()
	for i, a := range graphs {
		for j, b := range graphs {
			if i != j && strings.HasPrefix(b.DynamoNamespace(), a.DynamoNamespace()) {
				v.add("graphName", "%q makes graph %d's Dynamo namespace %q the beginning of graph %d's %q, so graph %d's frontend would take graph %d's workers for its own: choose another graphName",
					c.GraphName, i+1, a.DynamoNamespace(), j+1, b.DynamoNamespace(), i+1, j+1)
				return
			}
		}
	}
}

// DrainDuration is scaleOut.drain (validated).
func (s ScaleOutConfig) DrainDuration() time.Duration {
	d, _ := time.ParseDuration(s.Drain)
	return d
}
