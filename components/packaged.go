package components

import (
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// DeploymentArgs are a Deployment's settings when another Pulumi program builds it as a component
// (in Go directly, in any other language through the package).
type DeploymentArgs struct {
	// Config is everything a stack's config would set: start from config.Defaults(profile) and
	// change what differs. It decides which objects exist and is checked against the cluster before
	// any is registered, so it is plain values, not outputs.
	Config config.Config
	// HFToken is the Hugging Face token of the model download (a secret; it may come from another
	// resource); nil when huggingFace.existingSecret names a Secret already in the namespace, or
	// nothing is downloaded.
	HFToken pulumi.StringInput
	// Kubeconfig is a kubeconfig's content the checks read the cluster with and, when the
	// component makes its own provider, the provider uses; "" uses KUBECONFIG (or ~/.kube/config),
	// with the context kubernetes.context.
	Kubeconfig string
	// ProviderGiven says the Kubernetes provider comes with the options in a form NewDeployment
	// cannot see: another language's provider reference (the package sets it), or a provider the
	// parent carries. A *kubernetes.Provider in pulumi.Provider or pulumi.Providers is seen without
	// it. Without a given provider the component makes its own from Config.Kubernetes and
	// Kubeconfig, as the program does. With one, a cluster the component cannot read (Kubeconfig, or
	// KUBECONFIG) stops it: the checks must read the cluster the provider writes to.
	ProviderGiven bool
	// Options are the program's options (a test's reader of the cluster).
	Options Options
}

// NewDeployment registers a Deployment as a component of the calling program (one per stack: its
// objects carry the stack's identity): the same checks
// against the cluster as the program's `up` (ownership, placement, the APIs the config needs) and
// the same objects, under the caller's parent, provider and transforms. Bad config stops it before
// any resource is registered, each problem named by its config key. Unlike the program it reads no
// stack config and exports nothing: Outputs gives what the program would export.
func NewDeployment(ctx *pulumi.Context, name string, args *DeploymentArgs, opts ...pulumi.ResourceOption) (*MiniMaxM3, error) {
	c := args.Config
	if err := config.Check(&c, args.HFToken != nil); err != nil {
		return nil, err
	}
	if ps := manifest.RepeatedFlags(&c); len(ps) > 0 {
		return nil, ps
	}
	raw := config.Raw{Values: map[string]string{}}
	if args.Kubeconfig != "" {
		raw.Values[config.KubeconfigKey] = args.Kubeconfig
	}
	return deploy(ctx, name, &c, raw, args.Options, &target{
		opts:        opts,
		ownProvider: !args.ProviderGiven && !kubernetesProviderIn(opts),
		token:       args.HFToken,
	})
}

// kubernetesProviderIn reports whether opts give a Kubernetes provider.
func kubernetesProviderIn(opts []pulumi.ResourceOption) bool {
	ro, err := pulumi.NewResourceOptions(opts...)
	if err != nil {
		return false
	}
	for _, p := range append([]pulumi.ProviderResource{ro.Provider}, ro.Providers...) {
		if _, ok := p.(*kubernetes.Provider); ok {
			return true
		}
	}
	return false
}
