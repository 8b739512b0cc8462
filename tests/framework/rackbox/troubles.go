package rackbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What goes wrong after a pod is placed, played by the box's kubelets (kwok stages) for a pod that
// carries TroubleAnnotation with one of these values (give a role's pods the annotation through
// its pod annotations). No image is pulled and no process runs here, so each is the pod status a
// real kubelet writes in that state, written once, a second after the pod is bound:
//   - TroubleImagePull: the image cannot be pulled. The pod stays Pending, its containers waiting
//     in ImagePullBackOff with the kubelet's message `Back-off pulling image "<image>"`.
//   - TroubleCrashLoop: the engine exits 1 at every start. Running, its containers waiting in
//     CrashLoopBackOff after 3 restarts, the last run ended Error with exit code 1.
//   - TroubleOOMKilled: the engine outgrows its memory limit. Running, its containers waiting in
//     CrashLoopBackOff after 1 restart, the last run ended OOMKilled with exit code 137.
//   - TroubleNeverReady: the engine runs and has started, but its readiness probe never passes:
//     the kubelet's Warning event Unhealthy says `Readiness probe failed: HTTP probe failed with
//     statuscode: 503`.
//   - TroubleImageNotFound: the registry answers that the image's tag does not exist. The pod
//     stays Pending, its containers waiting in ErrImagePull with containerd's message `failed to
//     pull and unpack image "<image>": failed to resolve reference "<image>": <image>: not found`.
//   - TroubleRegistryTimeout: the registry does not answer. The pod stays Pending, its containers
//     waiting in ErrImagePull with containerd's message ending `dial tcp 10.0.0.9:443: i/o
//     timeout`.
//
// A real kubelet goes on retrying (the restart count grows, the back-off doubles); the box writes
// the state the kubelet has reached by the time a user would look, and leaves it.
const (
	TroubleAnnotation      = "rackbox.minimax-m3.io/trouble"
	TroubleImagePull       = "image-pull-backoff"
	TroubleCrashLoop       = "crash-loop"
	TroubleOOMKilled       = "oom-killed"
	TroubleNeverReady      = "never-ready"
	TroubleImageNotFound   = "image-not-found"
	TroubleRegistryTimeout = "registry-timeout"
	troubleNodeUnready     = "not-ready"
)

// troubleStages are the kwok stages of the troubles above.
var troubleStages = strings.Join([]string{
	trouble(TroubleImagePull, "Pending", `
        ready: false
        restartCount: 0
        started: false
        state:
          waiting:
            reason: ImagePullBackOff
            message: {{ printf "Back-off pulling image %q" .image | Quote }}`),
	trouble(TroubleCrashLoop, "Running", crashed(3, 1, "Error", "back-off 40s")),
	trouble(TroubleOOMKilled, "Running", crashed(1, 137, "OOMKilled", "back-off 10s")),
	trouble(TroubleNeverReady, "Running", `
        ready: false
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}`) + `    event:
      type: Warning
      reason: Unhealthy
      message: "Readiness probe failed: HTTP probe failed with statuscode: 503"
`,
	trouble(TroubleImageNotFound, "Pending", pullFailure(`{{ printf "failed to pull and unpack image %q: failed to resolve reference %q: %s: not found" .image .image .image | Quote }}`)),
	trouble(TroubleRegistryTimeout, "Pending", pullFailure(`{{ printf "failed to pull and unpack image %q: failed to resolve reference %q: failed to do request: Head %q: dial tcp 10.0.0.9:443: i/o timeout" .image .image "https://registry/v2/" | Quote }}`)),
}, "")

// pullFailure is a container waiting in ErrImagePull with the kubelet's message (a template).
func pullFailure(message string) string {
	return `
        ready: false
        restartCount: 0
        started: false
        state:
          waiting:
            reason: ErrImagePull
            message: ` + message
}

// crashed is a container waiting in CrashLoopBackOff after restarts, its last run ended as said.
func crashed(restarts, exitCode int, reason, backOff string) string {
	return fmt.Sprintf(`
        ready: false
        restartCount: %d
        started: false
        lastState:
          terminated:
            exitCode: %d
            reason: %s
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
        state:
          waiting:
            reason: CrashLoopBackOff
            message: {{ printf "%s restarting failed container=%%s pod=%%s" .name $pod | Quote }}`, restarts, exitCode, reason, backOff)
}

// trouble is the stage that writes a troubled pod's status once, a second after it is bound: the
// pod's phase, not Ready, and each container's status (container: the YAML of its fields but name
// and image).
func trouble(value, phase, container string) string {
	return fmt.Sprintf(`---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: trouble-%[1]s
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.metadata.annotations["%[4]s"]'
      operator: 'In'
      values: ['%[1]s']
    - key: '.status.containerStatuses'
      operator: 'DoesNotExist'
  delay:
    durationMilliseconds: 500
    jitterDurationMilliseconds: 1000
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $pod := .metadata.name }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: ContainersNotReady
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: ContainersNotReady
        type: ContainersReady
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: PodScheduled
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}%[3]s
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
      phase: %[2]s
      startTime: {{ $now | Quote }}
`, value, phase, container, TroubleAnnotation)
}

// MakeNodeNotReady plays a tray whose kubelet stopped reporting: the box's kubelets stop
// heartbeating it, and its Ready condition turns Unknown the way the node lifecycle controller
// writes it when a kubelet falls silent (without waiting out its grace period). What the node
// lifecycle controller (kube-controller-manager) does next is its own: it taints the node
// unreachable, as in any cluster. A pod annotated with a TroubleAnnotation value the box does not
// know is never started (it stays Pending).
func (b *Box) MakeNodeNotReady(ctx context.Context, name string) error {
	if err := b.AnnotateNode(ctx, name, TroubleAnnotation, troubleNodeUnready); err != nil {
		return fmt.Errorf("marking node %s: %w", name, err)
	}
	var n corev1.Node
	if err := b.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return err
	}
	status := client.MergeFrom(n.DeepCopy())
	now := metav1.NewTime(time.Now())
	for i, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			n.Status.Conditions[i] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
				Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", LastHeartbeatTime: c.LastHeartbeatTime, LastTransitionTime: now}
		}
	}
	if err := b.Client.Status().Patch(ctx, &n, status); err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return nil
}

// AnnotateNode sets (or, with value "", removes) an annotation of a node: a tray's
// IMEXTroubleAnnotation, say.
func (b *Box) AnnotateNode(ctx context.Context, name, key, value string) error {
	var n corev1.Node
	if err := b.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return err
	}
	patch := client.MergeFrom(n.DeepCopy())
	if value == "" {
		delete(n.Annotations, key)
	} else {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[key] = value
	}
	return b.Client.Patch(ctx, &n, patch)
}
