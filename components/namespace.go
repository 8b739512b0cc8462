package components

import (
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// NamespaceArgs says which namespace the stack deploys to and whether the stack owns it.
type NamespaceArgs struct {
	Name string
	// Create makes the stack create the namespace; otherwise an existing one is used by name and
	// never changed or deleted.
	Create bool
	// RetainOnDelete keeps a created namespace on destroy: deleting a namespace deletes every claim
	// in it, the model cache included.
	RetainOnDelete bool
	Meta           StackMeta
	// LegacyName is the component's logical name under the first naming scheme.
	LegacyName string
}

// Namespace is the namespace every object of the stack lives in.
type Namespace struct {
	pulumi.ResourceState
	Name pulumi.StringOutput `pulumi:"name"`
}

// NewNamespace creates the namespace, or uses an existing one.
func NewNamespace(ctx *pulumi.Context, name string, args *NamespaceArgs, opts ...pulumi.ResourceOption) (*Namespace, error) {
	ns := &Namespace{}
	opts = append(opts, legacyAlias(ctx, args.LegacyName, deploymentType, namespaceType))
	if err := ctx.RegisterComponentResource(namespaceType, name, ns, opts...); err != nil {
		return nil, err
	}
	ns.Name = pulumi.String(args.Name).ToStringOutput()
	if args.Create {
		created, err := corev1.NewNamespace(ctx, name, &corev1.NamespaceArgs{
			Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(args.Name), Labels: stackLabels(ctx), Annotations: args.Meta.annotations(ctx, "Namespace", args.Name, nil)},
		}, pulumi.Parent(ns), pulumi.RetainOnDelete(args.RetainOnDelete),
			legacyAlias(ctx, args.LegacyName, deploymentType, namespaceType, "kubernetes:core/v1:Namespace"))
		if err != nil {
			return nil, err
		}
		ns.Name = created.Metadata.Name().Elem()
	}
	return ns, ctx.RegisterResourceOutputs(ns, pulumi.Map{"name": ns.Name})
}
