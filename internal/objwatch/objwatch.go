package objwatch

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// ByName lists and watches one object by name.
func ByName[L runtime.Object](name string, list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return selecting(metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}, list, watchFn)
}

// ByLabel lists and watches the objects a label selector matches.
func ByLabel[L runtime.Object](selector string, list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return selecting(metav1.ListOptions{LabelSelector: selector}, list, watchFn)
}

// ByFields lists and watches the objects a field selector matches.
func ByFields[L runtime.Object](selector fields.Selector, list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return selecting(metav1.ListOptions{FieldSelector: selector.String()}, list, watchFn)
}

// All lists and watches every object of a resource.
func All[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return selecting(metav1.ListOptions{}, list, watchFn)
}

func selecting[L runtime.Object](sel metav1.ListOptions, list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector, o.LabelSelector = sel.FieldSelector, sel.LabelSelector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector, o.LabelSelector = sel.FieldSelector, sel.LabelSelector
			return watchFn(ctx, o)
		},
	}
}

// Until is watchtools.UntilWithSync, returning the context's error when it is done (an interrupt)
// instead of a timeout.
func Until(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object, pre watchtools.PreconditionFunc, cond watchtools.ConditionFunc) (*watch.Event, error) {
	e, err := watchtools.UntilWithSync(ctx, lw, obj, pre, cond)
	if err != nil && ctx.Err() != nil {
		return e, ctx.Err()
	}
	return e, err
}
