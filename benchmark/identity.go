package benchmark

import (
	"context"
	"fmt"
	"minimax-m3/internal/cluster"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// componentLabel is the label the Dynamo operator puts on a graph's pods with their component.
const componentLabel = "nvidia.com/dynamo-component"

// ComponentImage is the image one of the graph's components runs: as its pod spec names it, and
// the digest its kubelet resolved (the container status's imageID; empty until one reports it).
type ComponentImage struct {
	Component string `json:"component"`
	Image     string `json:"image"`
	ImageID   string `json:"imageID,omitempty"`
}

// graphImages are the images of the graph's main containers, one per component, from its pods
// (else from its spec).
func (s *Sweep) graphImages(ctx context.Context) ([]ComponentImage, error) {
	list, err := s.Kube.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: graphPodLabel + "=" + s.Config.GraphName})
	if err != nil {
		return nil, fmt.Errorf("reading the graph's pods: %w", err)
	}
	seen := map[string]ComponentImage{}
	for _, p := range list.Items {
		component := p.Labels[componentLabel]
		if component == "" || p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 {
			continue
		}
		// The operator names the component's own container "main".
		main := p.Spec.Containers[0]
		for _, c := range p.Spec.Containers {
			if c.Name == "main" {
				main = c
			}
		}
		ci := ComponentImage{Component: component, Image: main.Image, ImageID: imageID(p, main.Name)}
		if old, ok := seen[component]; !ok || old.ImageID == "" {
			seen[component] = ci
		}
	}
	// A component with no pod (yet) is named by the graph's spec, without a digest.
	if s.Dynamic != nil {
		if g, err := s.Dynamic.Resource(cluster.GraphResource).Namespace(s.Namespace).Get(ctx, s.Config.GraphName, metav1.GetOptions{}); err == nil {
			comps, _, _ := unstructured.NestedSlice(g.Object, "spec", "components")
			for _, c := range comps {
				m, _ := c.(map[string]any)
				name, _ := m["name"].(string)
				if _, ok := seen[name]; ok || name == "" {
					continue
				}
				containers, _, _ := unstructured.NestedSlice(m, "podTemplate", "spec", "containers")
				for _, ct := range containers {
					cm, _ := ct.(map[string]any)
					if cm["name"] == "main" {
						image, _ := cm["image"].(string)
						seen[name] = ComponentImage{Component: name, Image: image}
					}
				}
			}
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("graph %s has no running pods: run `pulumi up` first", s.Config.GraphName)
	}
	out := make([]ComponentImage, 0, len(seen))
	for _, c := range seen {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b ComponentImage) int {
		if a.Component < b.Component {
			return -1
		}
		if a.Component > b.Component {
			return 1
		}
		return 0
	})
	return out, nil
}

func imageID(p corev1.Pod, container string) string {
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == container {
			return st.ImageID
		}
	}
	return ""
}

// containerImageID is the digest a pod's container runs, once its kubelet reports it.
func (s *Sweep) containerImageID(ctx context.Context, pod, container string) string {
	p, err := s.Kube.CoreV1().Pods(s.Namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return imageID(*p, container)
}
