package rackbox

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Occupy plays another team on a shared pool: in its namespace, one pod bound to each named tray
// holding all of that tray's GPUs (kwok runs it), as a training job placed before the stack's
// arrives. It returns the pods, for the caller to delete when the team leaves.
func (b *Box) Occupy(ctx context.Context, team string, trays ...string) ([]*corev1.Pod, error) {
	if err := b.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	var pods []*corev1.Pod
	for _, tray := range trays {
		node := &corev1.Node{}
		if err := b.Client.Get(ctx, client.ObjectKey{Name: tray}, node); err != nil {
			return pods, fmt.Errorf("tray %s: %w", tray, err)
		}
		gpus := corev1.ResourceList{GPU: node.Status.Allocatable[GPU]}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "training-" + tray},
			Spec: corev1.PodSpec{
				NodeName:    tray,
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "train", Image: "team.example/train:1",
					Resources: corev1.ResourceRequirements{Requests: gpus, Limits: gpus}}},
			},
		}
		if err := b.Client.Create(ctx, p); err != nil {
			return pods, fmt.Errorf("tray %s: %w", tray, err)
		}
		pods = append(pods, p)
	}
	return pods, nil
}
