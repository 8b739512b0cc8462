package benchmark

import (
	"context"
	"errors"
	"fmt"
	"minimax-m3/internal/cluster"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"minimax-m3/internal/objwatch"
)

// cleanup deletes one object the sweep created, even when ctx is done (an interrupt).
func (s *Sweep) cleanup(phase Phase, point, concurrency int, kind, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	background := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &background}
	var err error
	switch kind {
	case "pod":
		err = s.Kube.CoreV1().Pods(s.Namespace).Delete(ctx, name, opts)
	case "job":
		err = s.Kube.BatchV1().Jobs(s.Namespace).Delete(ctx, name, opts)
	}
	msg := fmt.Sprintf("deleted %s %s", kind, name)
	switch {
	case apierrors.IsNotFound(err):
		return
	case err != nil:
		msg = fmt.Sprintf("could not delete %s %s: %v (delete it by hand)", kind, name, err)
	}
	s.emit(Event{Point: point, Points: len(s.Concurrency), Concurrency: concurrency, Phase: phase, Message: msg, Done: true})
}

func (s *Sweep) startHelper(ctx context.Context, name string) error {
	return s.step(ctx, 0, 0, PhaseHelper, "starting pod "+name+" with the model cache claim", nil, func(ctx context.Context, beat func(string)) error {
		pod := HelperPod(s.Config, s.Namespace, name)
		pod.Labels[RunLabel] = s.RunID
		if err := s.Kube.CoreV1().Pods(s.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
			beat("deleted a helper pod left by an earlier sweep")
			if err := s.waitGone(ctx, "pods", name); err != nil {
				return err
			}
		}
		if _, err := s.Kube.CoreV1().Pods(s.Namespace).Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		beat("waiting for pod " + name + " to be Ready")
		return s.waitPodReady(ctx, name)
	})
}

// runJob creates a Job (replacing one of the sweep's own left by an interrupted run) and waits
// until it completes or fails; onPod then sees each of its pods.
func (s *Sweep) runJob(ctx context.Context, job *batchv1.Job, beat func(string), onPod ...func(pod string)) error {
	jobs := s.Kube.BatchV1().Jobs(s.Namespace)
	if old, err := jobs.Get(ctx, job.Name, metav1.GetOptions{}); err == nil {
		if old.Labels["app.kubernetes.io/component"] != "benchmark" || old.Labels["minimax-m3.io/graph"] != s.Config.GraphName {
			return fmt.Errorf("a Job %s/%s exists that this sweep did not create: not touching it", s.Namespace, job.Name)
		}
		beat("deleting Job " + job.Name + " left by an earlier sweep")
		background := metav1.DeletePropagationBackground
		if err := jobs.Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err := s.waitGone(ctx, "jobs", job.Name); err != nil {
			return err
		}
	}
	if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return err
	}
	beat("Job " + job.Name + " running")
	lw := objwatch.ByName(job.Name, jobs.List, jobs.Watch)
	var failed *batchv1.JobCondition
	_, err := objwatch.Until(ctx, lw, &batchv1.Job{}, nil, func(e watch.Event) (bool, error) {
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("the Job %s was deleted", job.Name)
		}
		j, ok := e.Object.(*batchv1.Job)
		if !ok {
			return false, nil
		}
		for i, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				return true, nil
			case batchv1.JobFailed:
				failed = &j.Status.Conditions[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if len(onPod) > 0 {
		if pods, err := s.Kube.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name}); err == nil {
			for _, p := range pods.Items {
				for _, f := range onPod {
					f(p.Name)
				}
			}
		}
	}
	if failed != nil {
		msg := fmt.Sprintf("Job %s failed: %s: %s", job.Name, failed.Reason, failed.Message)
		if logs := s.terminationMessage(ctx, job.Name); logs != "" {
			msg += "\n" + logs
		}
		return errors.New(msg)
	}
	return nil
}

// terminationMessage is the termination message of a Job's pods, the end of their log on failure.
func (s *Sweep) terminationMessage(ctx context.Context, job string) string {
	pods, err := s.Kube.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		return ""
	}
	var msgs []string
	for _, p := range pods.Items {
		for _, st := range p.Status.ContainerStatuses {
			if t := st.State.Terminated; t != nil && strings.TrimSpace(t.Message) != "" {
				msgs = append(msgs, fmt.Sprintf("[Pod %s] %s", p.Name, strings.TrimSpace(t.Message)))
			}
		}
	}
	return strings.Join(msgs, "\n")
}

// describeGraph is the graph's restart and readiness as the operator reports them.
func (s *Sweep) describeGraph(ctx context.Context) string {
	g, err := s.Dynamic.Resource(cluster.GraphResource).Namespace(s.Namespace).Get(ctx, s.Config.GraphName, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	id, _, _ := unstructured.NestedString(g.Object, "status", "restart", "observedID")
	phase, _, _ := unstructured.NestedString(g.Object, "status", "restart", "phase")
	inProgress, _, _ := unstructured.NestedStringSlice(g.Object, "status", "restart", "inProgress")
	ready := "not Ready"
	conds, _, _ := unstructured.NestedSlice(g.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
			ready = "Ready"
		}
	}
	d := fmt.Sprintf("operator: restart %q %s", id, phase)
	if len(inProgress) > 0 {
		d += " (restarting " + strings.Join(inProgress, ", ") + ")"
	}
	return d + ", graph " + ready
}

// describeJob is a Job's pods as the Job controller counts them.
func (s *Sweep) describeJob(name string) func(context.Context) string {
	return func(ctx context.Context) string {
		j, err := s.Kube.BatchV1().Jobs(s.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		st := j.Status
		ready := int32(0)
		if st.Ready != nil {
			ready = *st.Ready
		}
		return fmt.Sprintf("Job %s: %d active (%d ready), %d succeeded, %d failed", name, st.Active, ready, st.Succeeded, st.Failed)
	}
}

// waitRestarted waits until the operator reports the restart with this ID completed and the graph
// Ready at its current generation; a failed or superseded restart is an error at once.
func (s *Sweep) waitRestarted(ctx context.Context, id string) error {
	graphs := s.Dynamic.Resource(cluster.GraphResource).Namespace(s.Namespace)
	name := s.Config.GraphName
	lw := objwatch.ByName(name, graphs.List, graphs.Watch)
	_, err := objwatch.Until(ctx, lw, &unstructured.Unstructured{}, nil, func(e watch.Event) (bool, error) {
		g, ok := e.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("DynamoGraphDeployment %s was deleted", name)
		}
		return RestartDone(g, id)
	})
	return err
}

// RestartDone says whether a graph has completed the restart with this ID and is Ready at its
// generation; a restart the operator failed or superseded is an error.
func RestartDone(g *unstructured.Unstructured, id string) (bool, error) {
	observed, _, _ := unstructured.NestedString(g.Object, "status", "restart", "observedID")
	phase, _, _ := unstructured.NestedString(g.Object, "status", "restart", "phase")
	if observed != id {
		return false, nil
	}
	switch phase {
	case "Failed", "Superseded":
		return false, fmt.Errorf("the operator reports restart %s %s", id, phase)
	case "Completed":
	default:
		return false, nil
	}
	return cluster.ReadyAtGeneration(g), nil
}

func (s *Sweep) waitPodReady(ctx context.Context, name string) error {
	pods := s.Kube.CoreV1().Pods(s.Namespace)
	lw := objwatch.ByName(name, pods.List, pods.Watch)
	_, err := objwatch.Until(ctx, lw, &corev1.Pod{}, nil, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("pod %s was deleted", name)
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s stopped: %s %s", name, p.Status.Reason, p.Status.Message)
		}
		return podReady(*p), nil
	})
	return err
}

// waitGone waits until an object the sweep deleted is gone.
func (s *Sweep) waitGone(ctx context.Context, resource, name string) error {
	var (
		lw      cache.ListerWatcher
		example runtime.Object
	)
	if resource == "pods" {
		pods := s.Kube.CoreV1().Pods(s.Namespace)
		lw, example = objwatch.ByName(name, pods.List, pods.Watch), &corev1.Pod{}
	} else {
		jobs := s.Kube.BatchV1().Jobs(s.Namespace)
		lw, example = objwatch.ByName(name, jobs.List, jobs.Watch), &batchv1.Job{}
	}
	gone := func(store cache.Store) (bool, error) { return len(store.List()) == 0, nil }
	_, err := objwatch.Until(ctx, lw, example, gone, func(e watch.Event) (bool, error) {
		return e.Type == watch.Deleted, nil
	})
	return err
}
