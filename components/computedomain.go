package components

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	corev1 "k8s.io/api/core/v1"

	"minimax-m3/manifest"
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
	Meta   StackMeta
	// LegacyName is the component's logical name under the first naming scheme.
	LegacyName string
}

// ComputeDomain is the IMEX channel domain shared by all of a graph's workers.
type ComputeDomain struct {
	pulumi.ResourceState
	Name                 pulumi.StringOutput `pulumi:"name"`
	ChannelClaimTemplate pulumi.StringOutput `pulumi:"channelClaimTemplate"`
	// Ready lists what a graph must wait for: the ComputeDomain object when this component creates
	// it, nothing when it uses an existing channel. Depending on the component itself is not
	// enough: the SDK records a component's children as their registrations start, so a resource
	// registered right after the component could miss them.
	Ready []pulumi.Resource `pulumi:"-"`
	// UID is the created ComputeDomain's UID ("" with an existing channel): the DRA driver names the
	// domain's IMEX DaemonSet after it.
	UID pulumi.StringOutput `pulumi:"-"`
}

const computeDomainAPIVersion = "resource.nvidia.com/v1beta1"

// NewComputeDomain creates the ComputeDomain, or uses an existing channel.
func NewComputeDomain(ctx *pulumi.Context, name string, args *ComputeDomainArgs, opts ...pulumi.ResourceOption) (*ComputeDomain, error) {
	cd := &ComputeDomain{}
	opts = append(opts, legacyAlias(ctx, args.LegacyName, deploymentType, computeDomainType))
	if err := ctx.RegisterComponentResource(computeDomainType, name, cd, opts...); err != nil {
		return nil, err
	}
	cd.Name = pulumi.String("").ToStringOutput()
	cd.ChannelClaimTemplate = pulumi.String(args.ChannelClaimTemplate).ToStringOutput()
	cd.UID = pulumi.String("").ToStringOutput()
	if args.Create {
		// numNodes 0: the domain follows the workers that claim it instead of a fixed node count.
		domain := manifest.ComputeDomainSpec{Channel: manifest.ComputeDomainChannel{ResourceClaimTemplate: corev1.LocalObjectReference{Name: args.ChannelClaimTemplate}}}
		res, err := newObject(ctx, name, objectArgs{
			APIVersion: computeDomainAPIVersion, Kind: "ComputeDomain",
			Name: args.Name, Namespace: args.Namespace, Labels: stackLabels(ctx),
			Annotations: args.Meta.annotations(ctx, "ComputeDomain", args.Name, nil),
			Spec:        domain,
		}, pulumi.Parent(cd), legacyAlias(ctx, args.LegacyName, deploymentType, computeDomainType, "kubernetes:"+computeDomainAPIVersion+":ComputeDomain"))
		if err != nil {
			return nil, err
		}
		cd.Name = res.Metadata.Name().Elem()
		cd.Ready = []pulumi.Resource{res}
		cd.UID = res.Metadata.Uid().Elem()
	}
	return cd, ctx.RegisterResourceOutputs(cd, pulumi.Map{"name": cd.Name, "channelClaimTemplate": cd.ChannelClaimTemplate})
}
