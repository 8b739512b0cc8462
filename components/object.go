package components

import (
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/manifest"
)

// objectArgs is a Kubernetes object whose spec is built from typed Go structs: core/v1 and batch/v1
// types for the download Job, this package's CRD types for the graph and the ComputeDomain.
type objectArgs struct {
	APIVersion, Kind, Name string
	Namespace              pulumi.StringInput
	Labels, Annotations    pulumi.StringMap
	Spec                   any
}

// newObject registers the object under the provider's own type token
// (`kubernetes:<apiVersion>:<kind>`), so the provider diffs and awaits it as that kind: a Job built
// this way is awaited, replaced and failed like any Job.
func newObject(ctx *pulumi.Context, name string, a objectArgs, opts ...pulumi.ResourceOption) (*apiextensions.CustomResource, error) {
	body, err := manifest.Untyped(a.Spec)
	if err != nil {
		return nil, err
	}
	return newObjectWithSpec(ctx, name, a, body, opts...)
}

// newObjectWithSpec is newObject with a spec that is known only once other resources are: a.Spec
// is not read.
func newObjectWithSpec(ctx *pulumi.Context, name string, a objectArgs, body any, opts ...pulumi.ResourceOption) (*apiextensions.CustomResource, error) {
	return apiextensions.NewCustomResource(ctx, name, &apiextensions.CustomResourceArgs{
		ApiVersion: pulumi.String(a.APIVersion),
		Kind:       pulumi.String(a.Kind),
		Metadata: &metav1.ObjectMetaArgs{
			Name:        pulumi.String(a.Name),
			Namespace:   a.Namespace,
			Labels:      a.Labels,
			Annotations: a.Annotations,
		},
		OtherFields: kubernetes.UntypedArgs{"spec": body},
	}, opts...)
}
