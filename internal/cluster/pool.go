package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"minimax-m3/placement"
)

var (
	nodesResource = corev1.SchemeGroupVersion.WithResource("nodes")
	podsResource  = corev1.SchemeGroupVersion.WithResource("pods")
)

// Pool reads every node and every unfinished pod (those bound to a node hold its resources), the
// way the scheduler sees the cluster, in two list calls.
func (r *Reader) Pool(ctx context.Context) (placement.Pool, error) {
	var pool placement.Pool
	nodes, err := r.dynamic.Resource(nodesResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return pool, fmt.Errorf("listing nodes: %w", err)
	}
	for _, u := range nodes.Items {
		var n corev1.Node
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
			return pool, fmt.Errorf("node %s: %w", u.GetName(), err)
		}
		pool.Nodes = append(pool.Nodes, n)
	}
	pods, err := r.dynamic.Resource(podsResource).List(ctx, metav1.ListOptions{
		// Finished pods no longer hold anything; Pending ones are kept (a drained worker's
		// replacement), though only bound pods hold a node's resources.
		FieldSelector: "status.phase!=Succeeded,status.phase!=Failed",
	})
	if err != nil {
		return pool, fmt.Errorf("listing pods: %w", err)
	}
	for _, u := range pods.Items {
		var p corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			return pool, fmt.Errorf("pod %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
		pool.Pods = append(pool.Pods, p)
	}
	return pool, nil
}
