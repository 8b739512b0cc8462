package components

import (
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// ComputeDomainArgs describes the graph's NVLink ComputeDomain.
type ComputeDomainArgs struct {
	Namespace pulumi.StringInput
	Name      string
	// ChannelClaimTemplate is the ResourceClaimTemplate the ComputeDomain controller generates and
	// every worker's channel claim names.
	ChannelClaimTemplate string
	// Create false reuses an existing channel claim template (a pre-provisioned ComputeDomain).
	Create bool
}

// ComputeDomain is the IMEX channel domain shared by all of a graph's workers.
type ComputeDomain struct {
	pulumi.ResourceState
	Name                 pulumi.StringOutput `pulumi:"name"`
	ChannelClaimTemplate pulumi.StringOutput `pulumi:"channelClaimTemplate"`
}

// NewComputeDomain creates the ComputeDomain (resource.nvidia.com/v1beta1), or adopts a channel.
func NewComputeDomain(ctx *pulumi.Context, name string, args *ComputeDomainArgs, opts ...pulumi.ResourceOption) (*ComputeDomain, error) {
	cd := &ComputeDomain{}
	if err := ctx.RegisterComponentResource("minimax-m3:index:ComputeDomain", name, cd, opts...); err != nil {
		return nil, err
	}
	cd.Name = pulumi.String("").ToStringOutput()
	cd.ChannelClaimTemplate = pulumi.String(args.ChannelClaimTemplate).ToStringOutput()
	if args.Create {
		// numNodes 0: the domain follows the workers that claim it instead of a fixed node count.
		spec, err := untyped(ComputeDomainSpec{
			NumNodes: 0,
			Channel:  ComputeDomainChannel{ResourceClaimTemplate: NamedObject{Name: args.ChannelClaimTemplate}},
		})
		if err != nil {
			return nil, err
		}
		res, err := apiextensions.NewCustomResource(ctx, name, &apiextensions.CustomResourceArgs{
			ApiVersion:  pulumi.String("resource.nvidia.com/v1beta1"),
			Kind:        pulumi.String("ComputeDomain"),
			Metadata:    &metav1.ObjectMetaArgs{Name: pulumi.String(args.Name), Namespace: args.Namespace, Labels: managedLabels()},
			OtherFields: kubernetes.UntypedArgs{"spec": spec},
		}, pulumi.Parent(cd))
		if err != nil {
			return nil, err
		}
		cd.Name = res.Metadata.Name().Elem()
	}
	return cd, ctx.RegisterResourceOutputs(cd, pulumi.Map{"name": cd.Name, "channelClaimTemplate": cd.ChannelClaimTemplate})
}
