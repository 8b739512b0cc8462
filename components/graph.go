package components

import (
	"fmt"
	"time"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
)

// GraphArgs describes the Dynamo graph of one stack.
type GraphArgs struct {
	Namespace pulumi.StringInput
	Config    *config.Config
}

// Graph is the DynamoGraphDeployment and the ConfigMap its workers read the speculative config from.
type Graph struct {
	pulumi.ResourceState
	Name      pulumi.StringOutput `pulumi:"name"`
	ConfigMap pulumi.StringOutput `pulumi:"configMap"`
}

// NewGraph creates the ConfigMap and the DynamoGraphDeployment and, unless disabled, waits until
// the Dynamo operator reports the graph Ready.
func NewGraph(ctx *pulumi.Context, name string, args *GraphArgs, opts ...pulumi.ResourceOption) (*Graph, error) {
	g := &Graph{}
	if err := ctx.RegisterComponentResource("minimax-m3:index:DynamoGraph", name, g, opts...); err != nil {
		return nil, err
	}
	c := args.Config

	cm, err := corev1.NewConfigMap(ctx, name+"-config", &corev1.ConfigMapArgs{
		Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(c.ConfigMapName()), Namespace: args.Namespace, Labels: managedLabels()},
		Data:     pulumi.ToStringMap(SpeculativeConfigs(c)),
	}, pulumi.Parent(g))
	if err != nil {
		return nil, err
	}

	spec, err := untyped(GraphSpec(c))
	if err != nil {
		return nil, err
	}
	annotations, timeouts := readiness(c.Readiness)
	dgd, err := apiextensions.NewCustomResource(ctx, name, &apiextensions.CustomResourceArgs{
		ApiVersion: pulumi.String("nvidia.com/v1beta1"),
		Kind:       pulumi.String("DynamoGraphDeployment"),
		Metadata: &metav1.ObjectMetaArgs{
			Name:      pulumi.String(c.GraphName),
			Namespace: args.Namespace,
			Labels: pulumi.StringMap{
				"app.kubernetes.io/name":    pulumi.String(c.GraphName),
				"app.kubernetes.io/part-of": pulumi.String("dynamo"),
			},
			Annotations: annotations,
		},
		OtherFields: kubernetes.UntypedArgs{"spec": spec},
	}, pulumi.Parent(g), pulumi.DependsOn([]pulumi.Resource{cm}), pulumi.Timeouts(timeouts))
	if err != nil {
		return nil, err
	}
	g.Name = dgd.Metadata.Name().Elem()
	g.ConfigMap = cm.Metadata.Name().Elem()
	return g, ctx.RegisterResourceOutputs(g, pulumi.Map{"name": g.Name, "configMap": g.ConfigMap})
}

// readiness turns the readiness config into the provider's await annotation and timeouts.
func readiness(r config.ReadinessConfig) (pulumi.StringMap, *pulumi.CustomTimeouts) {
	if !r.WaitForReady {
		return pulumi.StringMap{"pulumi.com/skipAwait": pulumi.String("true")}, nil
	}
	d, _ := time.ParseDuration(r.Timeout) // validated
	t := fmt.Sprint(d)
	// The operator sets Ready once every component's pods are ready.
	return pulumi.StringMap{"pulumi.com/waitFor": pulumi.String("condition=Ready")},
		&pulumi.CustomTimeouts{Create: t, Update: t}
}
