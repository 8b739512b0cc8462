package cluster

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
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

// Gateway is what the route check needs of a live Gateway: its listeners.
type Gateway struct {
	Namespace, Name string
	Listeners       []Listener
}

// Listener is one of a Gateway's listeners and which routes it admits (allowedRoutes).
type Listener struct {
	Name string
	// From is allowedRoutes.namespaces.from: Same (the default), All or Selector, with Selector.
	From     string
	Selector *metav1.LabelSelector
	// Kinds are allowedRoutes.kinds (empty: the kinds the protocol allows, HTTPRoute for HTTP and
	// HTTPS).
	Kinds []string
}

var gateways = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}

// Gateway reads a Gateway's listeners; found is false when there is no such Gateway.
func (r *Reader) Gateway(ctx context.Context, namespace, name string) (Gateway, bool, error) {
	u, err := r.dynamic.Resource(gateways).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Gateway{}, false, nil
	}
	if err != nil {
		return Gateway{}, false, err
	}
	g := Gateway{Namespace: namespace, Name: name}
	listeners, _, _ := unstructured.NestedSlice(u.Object, "spec", "listeners")
	for _, l := range listeners {
		m, _ := l.(map[string]any)
		li := Listener{From: "Same"}
		li.Name, _ = m["name"].(string)
		if from, _, _ := unstructured.NestedString(m, "allowedRoutes", "namespaces", "from"); from != "" {
			li.From = from
		}
		if sel, found, _ := unstructured.NestedMap(m, "allowedRoutes", "namespaces", "selector"); found {
			var s metav1.LabelSelector
			if runtime.DefaultUnstructuredConverter.FromUnstructured(sel, &s) == nil {
				li.Selector = &s
			}
		}
		kinds, _, _ := unstructured.NestedSlice(m, "allowedRoutes", "kinds")
		for _, k := range kinds {
			if km, ok := k.(map[string]any); ok {
				if kind, _ := km["kind"].(string); kind != "" {
					li.Kinds = append(li.Kinds, kind)
				}
			}
		}
		g.Listeners = append(g.Listeners, li)
	}
	return g, true, nil
}
