package components

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Labels every object a stack creates carries, so `kubectl get -l app.kubernetes.io/instance=<stack>`
// tells stacks apart in a shared namespace, and the ownership check knows what a stack created.
const (
	instanceLabel  = "app.kubernetes.io/instance"
	managedByLabel = "app.kubernetes.io/managed-by"
	partOfLabel    = "app.kubernetes.io/part-of"
	managedBy      = "pulumi"
	partOf         = "minimax-m3"
)

// BenchmarkLabel marks the graph of a stack with benchmark.enabled: the one kind of stack on which
// the PR-check policies allow synthetic speculative acceptance.
const BenchmarkLabel = "minimax-m3.io/benchmark"

// stackLabels are the labels of an object the stack creates.
func stackLabels(ctx *pulumi.Context) pulumi.StringMap {
	return pulumi.StringMap{
		managedByLabel: pulumi.String(managedBy),
		partOfLabel:    pulumi.String(partOf),
		instanceLabel:  pulumi.String(ctx.Stack()),
	}
}

// legacyAlias is the URN a resource had when every logical name was derived from graphName (the
// program's first naming scheme), with the same component nesting: types lists the types from the
// top-level component down to the resource's own.
func legacyAlias(ctx *pulumi.Context, name string, types ...string) pulumi.ResourceOption {
	return pulumi.Aliases([]pulumi.Alias{{URN: legacyURN(ctx, name, types...)}})
}

func legacyURN(ctx *pulumi.Context, name string, types ...string) pulumi.URNInput {
	return pulumi.URN(fmt.Sprintf("urn:pulumi:%s::%s::%s::%s", ctx.Stack(), ctx.Project(), strings.Join(types, "$"), name))
}
