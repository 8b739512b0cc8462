package components

import (
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	networkingv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/networking/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
)

// ClientLabel is on the stack's own pods that call the graph (the smoke test's, the benchmark's),
// with the graph's name: the graph's NetworkPolicy admits them.
const ClientLabel = "minimax-m3.io/graph"

// EndpointPickerPort is the endpoint picker's gRPC port, which the operator's InferencePool names
// for the gateway.
const EndpointPickerPort = 9002

// namespaceNameLabel is the label Kubernetes puts on every namespace with its name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// NetworkPolicySpec is the graph's ingress isolation: its pods accept traffic only from the
// graph's own pods (frontend and workers among themselves, the endpoint picker), the stack's
// clients (ClientLabel), the site's Gateway namespace on the frontend's port when the route is on,
// and networkPolicy.allowedNamespaces (the operator's, the site's Prometheus). Everything else,
// another team's pods above all, is denied: the frontend's API, metrics and admin endpoints have
// no authentication of their own. Egress is left open (the download reaches its hub).
func NetworkPolicySpec(c *config.Config) *networkingv1.NetworkPolicySpecArgs {
	graph := pulumi.StringMap{cluster.GraphLabel: pulumi.String(c.GraphName)}
	from := networkingv1.NetworkPolicyPeerArray{
		networkingv1.NetworkPolicyPeerArgs{PodSelector: &metav1.LabelSelectorArgs{MatchLabels: graph}},
		networkingv1.NetworkPolicyPeerArgs{PodSelector: &metav1.LabelSelectorArgs{MatchLabels: pulumi.StringMap{ClientLabel: pulumi.String(c.GraphName)}}},
	}
	for _, ns := range c.NetworkPolicy.AllowedNamespaces {
		from = append(from, networkingv1.NetworkPolicyPeerArgs{NamespaceSelector: &metav1.LabelSelectorArgs{
			MatchLabels: pulumi.StringMap{namespaceNameLabel: pulumi.String(ns)}}})
	}
	rules := networkingv1.NetworkPolicyIngressRuleArray{networkingv1.NetworkPolicyIngressRuleArgs{From: from}}
	if c.Exposure.Enabled {
		// The frontend's port (a worker's frontend sidecar's, behind an InferencePool), and the
		// endpoint picker's, which the gateway asks where each request goes.
		ports := networkingv1.NetworkPolicyPortArray{networkingv1.NetworkPolicyPortArgs{Protocol: pulumi.String("TCP"), Port: pulumi.Int(config.FrontendPort)}}
		if c.InferencePool() {
			ports = append(ports, networkingv1.NetworkPolicyPortArgs{Protocol: pulumi.String("TCP"), Port: pulumi.Int(EndpointPickerPort)})
		}
		rules = append(rules, networkingv1.NetworkPolicyIngressRuleArgs{
			From: networkingv1.NetworkPolicyPeerArray{networkingv1.NetworkPolicyPeerArgs{NamespaceSelector: &metav1.LabelSelectorArgs{
				MatchLabels: pulumi.StringMap{namespaceNameLabel: pulumi.String(c.Exposure.Gateway.Namespace)}}}},
			Ports: ports,
		})
	}
	return &networkingv1.NetworkPolicySpecArgs{
		PodSelector: &metav1.LabelSelectorArgs{MatchLabels: graph},
		PolicyTypes: pulumi.StringArray{pulumi.String("Ingress")},
		Ingress:     rules,
	}
}

// newNetworkPolicy adds the graph's NetworkPolicy (networkPolicy.enabled).
func newNetworkPolicy(ctx *pulumi.Context, component string, g *Graph, args *GraphArgs) error {
	c := args.Config
	if !c.NetworkPolicy.Enabled {
		return nil
	}
	name := c.NetworkPolicyName()
	_, err := networkingv1.NewNetworkPolicy(ctx, graphChild(component, "network-policy", args.Index), &networkingv1.NetworkPolicyArgs{
		Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(name), Namespace: args.Namespace, Labels: stackLabels(ctx),
			Annotations: args.Meta.annotations(ctx, "NetworkPolicy", name, nil)},
		Spec: NetworkPolicySpec(c),
	}, pulumi.Parent(g))
	return err
}
