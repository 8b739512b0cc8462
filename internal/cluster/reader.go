package cluster

import (
	"context"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// LiveObject is what the ownership check needs of a live object: its labels and annotations.
type LiveObject struct {
	Labels      map[string]string
	Annotations map[string]string
}

// Reader reads object metadata, Jobs' pods and graphs' status with the kubeconfig the provider
// uses.
type Reader struct {
	client    metadata.Interface
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface
}

// New reads the cluster of a kubeconfig file (empty: KUBECONFIG or ~/.kube/config) and context
// (empty: its current context), as the Kubernetes provider does.
func New(kubeconfig, kubeContext string) (*Reader, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	if kubeconfig == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		if _, err := os.Stat(clientcmd.RecommendedHomeFile); err != nil {
			return nil, fmt.Errorf("no kubeconfig (KUBECONFIG is unset and %s does not exist)", clientcmd.RecommendedHomeFile)
		}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, err
	}
	return newForConfig(cfg)
}

// NewFromKubeconfig reads the cluster of a kubeconfig's content and context (empty: its current
// context), as the Kubernetes provider does with its kubeconfig argument.
func NewFromKubeconfig(kubeconfig []byte, kubeContext string) (*Reader, error) {
	cfg, err := RESTConfigFromKubeconfig(kubeconfig, kubeContext)
	if err != nil {
		return nil, err
	}
	return newForConfig(cfg)
}

// RESTConfigFromKubeconfig is the client config of a kubeconfig's content and context (empty: its
// current context).
func RESTConfigFromKubeconfig(kubeconfig []byte, kubeContext string) (*rest.Config, error) {
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	return clientcmd.NewNonInteractiveClientConfig(*raw, kubeContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
}

func newForConfig(cfg *rest.Config) (*Reader, error) {
	cfg.Timeout = 15 * time.Second
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Reader{client, dyn, disc}, nil
}

// Served says whether the cluster serves a resource (its CRD is installed): what a kind needs
// before the stack can create objects of it.
func (r *Reader) Served(_ context.Context, gvr schema.GroupVersionResource) (bool, error) {
	if r.discovery == nil {
		return true, nil
	}
	list, err := r.discovery.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, res := range list.APIResources {
		if res.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// Read reads a live object's metadata; found is false when it does not exist.
func (r *Reader) Read(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (LiveObject, bool, error) {
	var (
		obj *metav1.PartialObjectMetadata
		err error
	)
	if namespace == "" {
		obj, err = r.client.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	} else {
		obj, err = r.client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return LiveObject{}, false, nil
	case err != nil:
		return LiveObject{}, false, err
	}
	return LiveObject{Labels: obj.Labels, Annotations: obj.Annotations}, true, nil
}

// JobResult reads the termination message of a container of a Job's newest finished pod ("" when
// there is none).
func (r *Reader) JobResult(ctx context.Context, namespace, job, container string) (string, error) {
	pods, err := r.dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace(namespace).
		List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		return "", err
	}
	var newest time.Time
	msg := ""
	for _, p := range pods.Items {
		statuses, _, _ := unstructured.NestedSlice(p.Object, "status", "containerStatuses")
		for _, st := range statuses {
			m, _ := st.(map[string]any)
			if m["name"] != container {
				continue
			}
			text, _, _ := unstructured.NestedString(m, "state", "terminated", "message")
			finished, _, _ := unstructured.NestedString(m, "state", "terminated", "finishedAt")
			at, _ := time.Parse(time.RFC3339, finished)
			if text != "" && !at.Before(newest) {
				newest, msg = at, text
			}
		}
	}
	return msg, nil
}

// NewFromClients is a Reader on clients the caller made (a fake clientset in tests).
// It has no discovery client: Served then says every resource is served.
func NewFromClients(md metadata.Interface, dyn dynamic.Interface) *Reader {
	return &Reader{client: md, dynamic: dyn}
}
