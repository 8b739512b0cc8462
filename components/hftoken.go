package components

import (
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// HFTokenSecretArgs describes the Secret the model download reads HF_TOKEN from.
type HFTokenSecretArgs struct {
	// Meta carries the stack's identity and what it adopted into every object's annotations.
	Meta       StackMeta
	Namespace  pulumi.StringInput
	SecretName string
	// Token creates the Secret from a Pulumi secret; nil uses an existing Secret, which the stack
	// never changes or deletes.
	Token pulumi.StringInput
	// LegacyName is the component's logical name under the first naming scheme.
	LegacyName string
}

// HFTokenSecret is the Hugging Face token Secret.
type HFTokenSecret struct {
	pulumi.ResourceState
	SecretName pulumi.StringOutput `pulumi:"secretName"`
	// Ready lists what a reader of the token must wait for: the Secret when this component
	// creates it, nothing when the user brought their own (see ComputeDomain.Ready for why not
	// the component itself).
	Ready []pulumi.Resource `pulumi:"-"`
}

// NewHFTokenSecret creates the token Secret from a Pulumi secret, or uses an existing one.
func NewHFTokenSecret(ctx *pulumi.Context, name string, args *HFTokenSecretArgs, opts ...pulumi.ResourceOption) (*HFTokenSecret, error) {
	s := &HFTokenSecret{}
	opts = append(opts, legacyAlias(ctx, args.LegacyName, deploymentType, hfTokenType))
	if err := ctx.RegisterComponentResource(hfTokenType, name, s, opts...); err != nil {
		return nil, err
	}
	s.SecretName = pulumi.String(args.SecretName).ToStringOutput()
	if args.Token != nil {
		secret, err := corev1.NewSecret(ctx, name, &corev1.SecretArgs{
			Metadata: &metav1.ObjectMetaArgs{
				Name:        pulumi.String(args.SecretName),
				Namespace:   args.Namespace,
				Labels:      stackLabels(ctx),
				Annotations: args.Meta.annotations(ctx, "Secret", args.SecretName, nil),
			},
			Type: pulumi.String("Opaque"),
			// The token stays a secret in state, diffs and logs.
			StringData: pulumi.StringMap{"HF_TOKEN": pulumi.ToSecret(args.Token.ToStringOutput()).(pulumi.StringOutput)},
		}, pulumi.Parent(s), legacyAlias(ctx, args.LegacyName, deploymentType, hfTokenType, "kubernetes:core/v1:Secret"))
		if err != nil {
			return nil, err
		}
		s.SecretName = secret.Metadata.Name().Elem()
		s.Ready = []pulumi.Resource{secret}
	}
	return s, ctx.RegisterResourceOutputs(s, pulumi.Map{"secretName": s.SecretName})
}
