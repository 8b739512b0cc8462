package components

import (
	"fmt"
	"strings"

	"minimax-m3/manifest"
	"minimax-m3/preflight"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Annotations and outputs of the stack's own.
const (
	// patchForceAnnotation makes the provider's server-side apply take the fields another field
	// manager (kubectl's client-side apply) co-owns instead of failing with a conflict.
	patchForceAnnotation = "pulumi.com/patchForce"
	// IdentityOutput is the stack output holding the identity the stack's objects carry; the next
	// update reads it back, so a renamed stack still knows its objects.
	IdentityOutput = "stackIdentity"
	// GraphReadyGenerationOutput is the stack output holding the graph's generation its last
	// successful up saw Ready; the next up does not wait again for a graph it leaves at it.
	GraphReadyGenerationOutput = "graphReadyGeneration"
	// GraphsOutput is the stack output listing each graph of a stack of several (scaleOut.graphs):
	// its name, frontend, ComputeDomain and the generation its last up saw Ready.
	GraphsOutput = "graphs"
)

// StackIdentity is what tells this stack's objects from every other's: its organization, project
// and stack name.
func StackIdentity(ctx *pulumi.Context) string {
	return ctx.Organization() + "/" + ctx.Project() + "/" + ctx.Stack()
}

// StackMeta is what the ownership check learned about the stack's objects, for their metadata.
type StackMeta struct{ preflight.Ownership }

// annotations are the annotations of an object the stack manages: its identity, extra, and for an
// adopted object the adoption mark and the forced apply that takes kubectl's fields over (without
// it, the first change of a field the recipe's `kubectl apply` wrote fails with a conflict).
func (m StackMeta) annotations(ctx *pulumi.Context, kind, name string, extra pulumi.StringMap) pulumi.StringMap {
	out := pulumi.StringMap{manifest.StackAnnotation: pulumi.String(StackIdentity(ctx))}
	for k, v := range extra {
		out[k] = v
	}
	if m.Adopted(kind, name) {
		out[manifest.AdoptedAnnotation] = pulumi.String("true")
		out[patchForceAnnotation] = pulumi.String("true")
	}
	return out
}

// BenchmarkLabel marks the graph of a stack with benchmark.enabled: the one kind of stack on which
// the PR-check policies allow synthetic speculative acceptance.
const BenchmarkLabel = "minimax-m3.io/benchmark"

// stackLabels are the labels of an object the stack creates.
func stackLabels(ctx *pulumi.Context) pulumi.StringMap {
	return pulumi.StringMap{
		manifest.ManagedByLabel: pulumi.String(manifest.ManagedBy),
		manifest.PartOfLabel:    pulumi.String(manifest.PartOf),
		manifest.InstanceLabel:  pulumi.String(ctx.Stack()),
	}
}

// legacyAlias is the URN a resource had when every logical name was derived from graphName (the
// program's first naming scheme), with the same component nesting: types lists the types from the
// top-level component down to the resource's own.
func legacyAlias(ctx *pulumi.Context, name string, types ...string) pulumi.ResourceOption {
	if name == "" {
		return pulumi.Composite()
	}
	return pulumi.Aliases([]pulumi.Alias{{URN: legacyURN(ctx, name, types...)}})
}

// legacySuffixed is a legacy name with a suffix, or "" (no alias) when there is none: a Deployment
// built as a package's component has no legacy names.
func legacySuffixed(name, suffix string) string {
	if name == "" {
		return ""
	}
	return name + suffix
}

func legacyURN(ctx *pulumi.Context, name string, types ...string) pulumi.URNInput {
	return pulumi.URN(fmt.Sprintf("urn:pulumi:%s::%s::%s::%s", ctx.Stack(), ctx.Project(), strings.Join(types, "$"), name))
}

// graphComponent is the logical name of a graph's component (0-based index i): the name a stack of
// one graph gives it for the first graph, and that name with the graph's number for the others
// ("graph-2").
func graphComponent(name string, i int) string {
	if i == 0 {
		return name
	}
	return fmt.Sprintf("%s-%d", name, i+1)
}

// graphChild is the logical name of a child of graph i's component: its own name for the first
// graph, prefixed with the component's for the others, whose components share the first's type
// and would otherwise give their children the same URNs.
func graphChild(component, child string, i int) string {
	if i == 0 {
		return child
	}
	return component + "-" + child
}

// legacyOf is graph i's legacy name: only the first graph existed under the first naming scheme.
func legacyOf(legacy string, i int) string {
	if i > 0 {
		return ""
	}
	return legacy
}
