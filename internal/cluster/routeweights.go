package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// RolloutFieldManager is the field manager of the JSON patches with which a rollout graph by graph
// sets the route's weights. Gateway API keeps a route's rules as one list, so such a patch takes
// the whole list from the Kubernetes provider's apply; ReleaseRoute removes the manager from the
// route's managed fields (the values stay, owned by no manager), so that the provider's next apply
// takes them without a conflict: the provider does not force its applies.
const RolloutFieldManager = "minimax-m3-rollout"

// routeCallTimeout bounds each call a rollout makes to the API server.
const routeCallTimeout = 30 * time.Second

// RouteWeights are the weights of the live HTTPRoute's backends by name (absent weight is Gateway
// API's default, 1; a backend named twice counts once, by its first), and whether the route
// exists.
func (r *Reader) RouteWeights(ctx context.Context, namespace, route string) (map[string]int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, routeCallTimeout)
	defer cancel()
	obj, err := r.dynamic.Resource(httpRoutes).Namespace(namespace).Get(ctx, route, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := map[string]int64{}
	for _, ref := range backendRefs(obj, "") {
		name, _, _ := unstructured.NestedString(ref.ref, "name")
		if _, seen := out[name]; seen {
			continue
		}
		w, found, _ := unstructured.NestedInt64(ref.ref, "weight")
		if !found {
			w = 1
		}
		out[name] = w
	}
	return out, true, nil
}

// routeBackend is a backendRef of a route's rules and where it is.
type routeBackend struct {
	rule, index int
	ref         map[string]any
}

// backendRefs are the route's backendRefs named backend ("": all).
func backendRefs(obj *unstructured.Unstructured, backend string) []routeBackend {
	var out []routeBackend
	rules, _, _ := unstructured.NestedSlice(obj.Object, "spec", "rules")
	for i, rule := range rules {
		refs, _, _ := unstructured.NestedSlice(asMap(rule), "backendRefs")
		for j, ref := range refs {
			if name, _, _ := unstructured.NestedString(asMap(ref), "name"); backend == "" || name == backend {
				out = append(out, routeBackend{rule: i, index: j, ref: asMap(ref)})
			}
		}
	}
	return out
}

// SetRouteWeight sets the weight of every backendRef named backend in the live HTTPRoute to weight:
// a JSON patch under RolloutFieldManager that first tests each backendRef's name where it was read
// (a status write in between changes nothing it relies on), read again and retried when the rules
// moved meanwhile. A route without such a backend is an error.
func (r *Reader) SetRouteWeight(ctx context.Context, namespace, route, backend string, weight int64) error {
	return r.patchRoute(ctx, namespace, route, func(obj *unstructured.Unstructured) ([]map[string]any, error) {
		refs := backendRefs(obj, backend)
		if len(refs) == 0 {
			return nil, fmt.Errorf("HTTPRoute %s/%s has no backend %s", namespace, route, backend)
		}
		var ops []map[string]any
		for _, ref := range refs {
			at := fmt.Sprintf("/spec/rules/%d/backendRefs/%d", ref.rule, ref.index)
			ops = append(ops, map[string]any{"op": "test", "path": at + "/name", "value": backend},
				map[string]any{"op": "add", "path": at + "/weight", "value": weight})
		}
		return ops, nil
	}, metav1.PatchOptions{FieldManager: RolloutFieldManager})
}

// ReleaseRoute removes RolloutFieldManager from the route's managed fields, when it is there: the
// fields it set keep their values and belong to no manager until the provider's next apply takes
// them. A route that does not exist has nothing to release.
func (r *Reader) ReleaseRoute(ctx context.Context, namespace, route string) error {
	err := r.patchRoute(ctx, namespace, route, func(obj *unstructured.Unstructured) ([]map[string]any, error) {
		managed := obj.GetManagedFields()
		kept := slices.DeleteFunc(slices.Clone(managed), func(m metav1.ManagedFieldsEntry) bool { return m.Manager == RolloutFieldManager })
		if len(kept) == len(managed) {
			return nil, nil
		}
		if len(kept) == 0 {
			// An empty list would leave the managed fields as they are: one empty entry clears them.
			kept = []metav1.ManagedFieldsEntry{{}}
		}
		return []map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()},
			{"op": "replace", "path": "/metadata/managedFields", "value": kept},
		}, nil
	}, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// HoldsRoute reports whether RolloutFieldManager holds fields of the route (an interrupted
// rollout's).
func (r *Reader) HoldsRoute(ctx context.Context, namespace, route string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, routeCallTimeout)
	defer cancel()
	obj, err := r.dynamic.Resource(httpRoutes).Namespace(namespace).Get(ctx, route, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(obj.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool { return m.Manager == RolloutFieldManager }), nil
}

// patchRoute reads the route and applies the JSON patch ops builds from it (none: nothing to do),
// reading again and retrying a few times when a test of the patch fails (422) or the write
// conflicts (409).
func (r *Reader) patchRoute(ctx context.Context, namespace, route string, ops func(*unstructured.Unstructured) ([]map[string]any, error), opts metav1.PatchOptions) error {
	routes := r.dynamic.Resource(httpRoutes).Namespace(namespace)
	var err error
	for range 5 {
		err = func() error {
			ctx, cancel := context.WithTimeout(ctx, routeCallTimeout)
			defer cancel()
			obj, err := routes.Get(ctx, route, metav1.GetOptions{})
			if err != nil {
				return err
			}
			patch, err := ops(obj)
			if err != nil || len(patch) == 0 {
				return err
			}
			body, err := json.Marshal(patch)
			if err != nil {
				return err
			}
			_, err = routes.Patch(ctx, route, types.JSONPatchType, body, opts)
			return err
		}()
		if !retryable(err) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// retryable says whether a patch failed because the route changed since it was read: a write
// conflict (409), or a test of the patch that no longer holds (422).
func retryable(err error) bool {
	var status apierrors.APIStatus
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err) ||
		errors.As(err, &status) && status.Status().Code == http.StatusUnprocessableEntity
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
