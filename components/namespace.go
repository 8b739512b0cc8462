package components

import (
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
)

// NamespaceArgs says which namespace the stack deploys to and whether the stack owns it.
type NamespaceArgs struct {
	Name string
	// Create makes the stack create the namespace; otherwise an existing one is used by name and
	// never changed or deleted.
	Create bool
	// PodSecurity is the Pod Security level a created namespace enforces (namespace.podSecurity).
	PodSecurity string
	// WorkerRuntimeClass, at baseline, is the class the workers run by: a created namespace names
	// it (config.WorkerRuntimeClassAnnotation) for the other stacks that deploy into it.
	WorkerRuntimeClass string
	// RetainOnDelete keeps a created namespace on destroy: deleting a namespace deletes every claim
	// in it, the model cache included.
	RetainOnDelete bool
	Meta           StackMeta
	// LegacyName is the component's logical name under the first naming scheme.
	LegacyName string
}

// PodSecurityLabels are on every namespace the stack creates: it enforces level (namespace.podSecurity)
// and warns and audits at baseline, so the creator of any pod beyond baseline and the API server's
// audit log hear of it. At baseline the workers run by their RuntimeClass, which the site exempts
// from Pod Security admission, and config.PodPolicyLabel binds the site's admission policy, which
// holds them to baseline with their one exemption (docs/security.md); privileged is for a cluster
// that exempts no RuntimeClass. What keeps a stack's pods from the node either way is
// config.PodSecurity, checked in validation and the policies before anything is applied. A
// namespace the stack uses but did not create (namespace.create false), or took over (adopt),
// keeps its owner's labels.
func PodSecurityLabels(level string) map[string]string {
	if level != config.PodSecurityBaseline {
		level = config.PodSecurityPrivileged
	}
	labels := map[string]string{
		"pod-security.kubernetes.io/enforce":         level,
		"pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/warn":            "baseline",
		"pod-security.kubernetes.io/warn-version":    "latest",
		"pod-security.kubernetes.io/audit":           "baseline",
		"pod-security.kubernetes.io/audit-version":   "latest",
	}
	if level == config.PodSecurityBaseline {
		labels[config.PodPolicyLabel] = level
	}
	return labels
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
		labels := stackLabels(ctx)
		if !args.Meta.Adopted("Namespace", args.Name) {
			// A namespace that existed before the stack (adopt) keeps the level its owner set:
			// the forced apply that takes an adopted object over would otherwise lower it.
			for k, v := range PodSecurityLabels(args.PodSecurity) {
				labels[k] = pulumi.String(v)
			}
		}
		var extra pulumi.StringMap
		if args.PodSecurity == config.PodSecurityBaseline && args.WorkerRuntimeClass != "" && !args.Meta.Adopted("Namespace", args.Name) {
			extra = pulumi.StringMap{config.WorkerRuntimeClassAnnotation: pulumi.String(args.WorkerRuntimeClass)}
		}
		created, err := corev1.NewNamespace(ctx, name, &corev1.NamespaceArgs{
			Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(args.Name), Labels: labels, Annotations: args.Meta.annotations(ctx, "Namespace", args.Name, extra)},
		}, pulumi.Parent(ns), pulumi.RetainOnDelete(args.RetainOnDelete),
			legacyAlias(ctx, args.LegacyName, deploymentType, namespaceType, "kubernetes:core/v1:Namespace"))
		if err != nil {
			return nil, err
		}
		ns.Name = created.Metadata.Name().Elem()
	}
	return ns, ctx.RegisterResourceOutputs(ns, pulumi.Map{"name": ns.Name})
}
