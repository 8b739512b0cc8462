package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// RolloutFieldManager is the field manager under which a rollout graph by graph sets the route's
// weights. It holds them only while a graph drains and changes: ReleaseRoute removes it from the
// route's managed fields, leaving the values, so that the Kubernetes provider's next apply of the
// route takes them without a conflict (the provider does not force its applies).
const RolloutFieldManager = "minimax-m3-rollout"

// RouteWeight is the weight of the backend named backend in the live HTTPRoute's rules (the first
// backendRef of that name; absent weight is Gateway API's default, 1), and whether the route has
// such a backend.
func (r *Reader) RouteWeight(ctx context.Context, namespace, route, backend string) (int64, bool, error) {
	obj, err := r.dynamic.Resource(httpRoutes).Namespace(namespace).Get(ctx, route, metav1.GetOptions{})
	if err != nil {
		return 0, false, err
	}
	refs := backendRefs(obj, backend)
	if len(refs) == 0 {
		return 0, false, nil
	}
	w, found, _ := unstructured.NestedInt64(refs[0].ref, "weight")
	if !found {
		w = 1
	}
	return w, true, nil
}

// routeBackend is a backendRef of a route's rules and where it is.
type routeBackend struct {
	rule, index int
	ref         map[string]any
}

// backendRefs are the route's backendRefs named backend.
func backendRefs(obj *unstructured.Unstructured, backend string) []routeBackend {
	var out []routeBackend
	rules, _, _ := unstructured.NestedSlice(obj.Object, "spec", "rules")
	for i, rule := range rules {
		refs, _, _ := unstructured.NestedSlice(asMap(rule), "backendRefs")
		for j, ref := range refs {
			if name, _, _ := unstructured.NestedString(asMap(ref), "name"); name == backend {
				out = append(out, routeBackend{rule: i, index: j, ref: asMap(ref)})
			}
		}
	}
	return out
}

// SetRouteWeight sets the weight of every backendRef named backend in the live HTTPRoute to weight
// (a JSON patch under RolloutFieldManager, on the route as it was read). A route without such a
// backend is an error.
func (r *Reader) SetRouteWeight(ctx context.Context, namespace, route, backend string, weight int64) error {
	routes := r.dynamic.Resource(httpRoutes).Namespace(namespace)
	obj, err := routes.Get(ctx, route, metav1.GetOptions{})
	if err != nil {
		return err
	}
	refs := backendRefs(obj, backend)
	if len(refs) == 0 {
		return fmt.Errorf("HTTPRoute %s/%s has no backend %s", namespace, route, backend)
	}
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()}}
	for _, ref := range refs {
		ops = append(ops, map[string]any{"op": "add", "path": fmt.Sprintf("/spec/rules/%d/backendRefs/%d/weight", ref.rule, ref.index), "value": weight})
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	_, err = routes.Patch(ctx, route, types.JSONPatchType, body, metav1.PatchOptions{FieldManager: RolloutFieldManager})
	return err
}

// ReleaseRoute removes RolloutFieldManager from the route's managed fields: the fields it set keep
// their values and belong to no manager until the provider's next apply takes them.
func (r *Reader) ReleaseRoute(ctx context.Context, namespace, route string) error {
	routes := r.dynamic.Resource(httpRoutes).Namespace(namespace)
	obj, err := routes.Get(ctx, route, metav1.GetOptions{})
	if err != nil {
		return err
	}
	managed := obj.GetManagedFields()
	kept := slices.DeleteFunc(slices.Clone(managed), func(m metav1.ManagedFieldsEntry) bool { return m.Manager == RolloutFieldManager })
	if len(kept) == len(managed) || len(kept) == 0 {
		return nil
	}
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()},
		{"op": "replace", "path": "/metadata/managedFields", "value": kept},
	})
	if err != nil {
		return err
	}
	_, err = routes.Patch(ctx, route, types.JSONPatchType, body, metav1.PatchOptions{})
	return err
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
