package cluster

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Route is what the hostname check needs of a live HTTPRoute.
type Route struct {
	LiveObject
	Namespace, Name string
	Hostnames       []string
	// Gateways are the Gateways it attaches to, as namespace/name (a parent without a namespace is
	// in the route's own).
	Gateways []string
}

var httpRoutes = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}

// Routes lists every HTTPRoute of the cluster.
func (r *Reader) Routes(ctx context.Context) ([]Route, error) {
	list, err := r.dynamic.Resource(httpRoutes).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]Route, 0, len(list.Items))
	for _, item := range list.Items {
		rt := Route{
			LiveObject: LiveObject{Labels: item.GetLabels(), Annotations: item.GetAnnotations()},
			Namespace:  item.GetNamespace(), Name: item.GetName(),
		}
		rt.Hostnames, _, _ = unstructured.NestedStringSlice(item.Object, "spec", "hostnames")
		parents, _, _ := unstructured.NestedSlice(item.Object, "spec", "parentRefs")
		for _, p := range parents {
			m, _ := p.(map[string]any)
			if kind, _ := m["kind"].(string); kind != "" && kind != "Gateway" {
				continue
			}
			ns, _ := m["namespace"].(string)
			if ns == "" {
				ns = rt.Namespace
			}
			name, _ := m["name"].(string)
			rt.Gateways = append(rt.Gateways, ns+"/"+name)
		}
		out = append(out, rt)
	}
	return out, nil
}
