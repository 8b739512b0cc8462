package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// smokeOutcome is what the test, playing the kubelet and the Job controller, makes the smoke test's
// pod report: its exit code and termination message, as the script writes them.
type smokeOutcome struct {
	exitCode int32
	message  string
}

// playSmokeTest plays the controllers for one `up` with the smoke test on: the download Job
// completes; the graph becomes Ready (as the Dynamo operator marks it) only after the test has
// checked that no smoke test Job exists yet; then the smoke test Job's pod ends with outcome, and
// the Job completes or fails (BackoffLimitExceeded) accordingly. It returns the smoke test Job it
// played and whether one existed before the graph was Ready.
func playSmokeTest(ctx context.Context, t *testing.T, ns string, outcome smokeOutcome) (job *batchv1.Job, early bool) {
	for ctx.Err() == nil {
		var jobs batchv1.JobList
		require.NoError(t, cluster.client.List(ctx, &jobs, client.InNamespace(ns)))
		var smoke *batchv1.Job
		for i := range jobs.Items {
			j := &jobs.Items[i]
			if strings.Contains(j.Name, "-smoke-") && len(j.Status.Conditions) == 0 && j.DeletionTimestamp == nil {
				smoke = j
			} else if len(j.Status.Conditions) == 0 && j.DeletionTimestamp == nil {
				require.NoError(t, finishJob(ctx, j, false))
			}
		}
		ready := graphsReady(t, ns)
		if smoke != nil && !ready {
			early = true
		}
		if !ready {
			playDynamoOperator(ctx, t, ns, readyLikeTheOperator)
		}
		if smoke != nil {
			// The kubelet's part: a pod of the Job that ran and ended.
			controller := true
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: smoke.Name + "-pod", Namespace: ns, Labels: smoke.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: smoke.Name, UID: smoke.UID, Controller: &controller}}},
				Spec: *smoke.Spec.Template.Spec.DeepCopy()}
			require.NoError(t, cluster.client.Create(ctx, pod))
			now := metav1.Now()
			pod.Status.Phase = corev1.PodSucceeded
			if outcome.exitCode != 0 {
				pod.Status.Phase = corev1.PodFailed
			}
			podCond := func(typ corev1.PodConditionType, status corev1.ConditionStatus, reason string) corev1.PodCondition {
				return corev1.PodCondition{Type: typ, Status: status, Reason: reason, LastTransitionTime: now}
			}
			pod.Status.Conditions = []corev1.PodCondition{
				podCond(corev1.PodScheduled, corev1.ConditionTrue, ""), podCond(corev1.PodInitialized, corev1.ConditionTrue, ""),
				podCond(corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted"), podCond(corev1.PodReady, corev1.ConditionFalse, "PodCompleted"),
			}
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: smoke.Spec.Template.Spec.Containers[0].Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: outcome.exitCode, Reason: map[bool]string{true: "Completed", false: "Error"}[outcome.exitCode == 0],
					Message: outcome.message, StartedAt: now, FinishedAt: now,
				}}}}
			require.NoError(t, cluster.client.Status().Update(ctx, pod))
			time.Sleep(time.Second) // the provider reports the pod's state while it waits
			require.NoError(t, finishJob(ctx, smoke, outcome.exitCode != 0))
			return smoke, early
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, early
}

// graphsReady reports whether every graph in the namespace is Ready for its generation.
func graphsReady(t *testing.T, ns string) bool {
	g, found := get(t, graphGVK, ns, aggGraph)
	return found && readyGeneration(g) >= g.GetGeneration()
}

func TestSmokeTestRunsAfterTheGraphIsReadyAndReportsItsResult(t *testing.T) {
	ctx := context.Background()
	s := newStack(t, "agg", "smoke-test", auto.ConfigMap{"minimax-m3:smokeTest.enabled": {Value: "true"}})

	// A passing test: `up` returns with its result as a stack output.
	var wg sync.WaitGroup
	wg.Add(1)
	var job *batchv1.Job
	var early bool
	playCtx, stopPlaying := context.WithTimeout(ctx, 3*time.Minute)
	go func() {
		defer wg.Done()
		job, early = playSmokeTest(playCtx, t, s.ns, smokeOutcome{0, `{"passed": true, "status": 200, "latencyMs": 812, "reply": "Ready."}`})
	}()
	res, _, err := s.up(ctx)
	wg.Wait()
	stopPlaying()
	require.NoError(t, err, s.log.String())
	require.NotNil(t, job)
	assert.False(t, early, "the smoke test Job is created only once the graph is Ready")
	assert.Equal(t, map[string]any{"job": job.Name, "passed": true, "status": float64(200), "latencyMs": float64(812), "reply": "Ready."},
		res.Outputs["smokeTest"].Value)
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "http://"+aggGraph+"-frontend:8000", env["SMOKE_TEST_URL"])
	assert.Equal(t, "nvidia/MiniMax-M3-NVFP4", env["SMOKE_TEST_MODEL"])

	// Nothing changed: nothing runs again, and the output reads the same.
	_, err = s.preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, s.log.String())

	// A vLLM flag is a new graph generation: a new smoke test Job runs, and when it fails, `up` fails
	// at once with the Job's reason and the response's status and body among its messages.
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "32")
	wg.Add(1)
	var failed *batchv1.Job
	playCtx, stopPlaying = context.WithTimeout(ctx, 3*time.Minute)
	go func() {
		defer wg.Done()
		failed, _ = playSmokeTest(playCtx, t, s.ns, smokeOutcome{1, `{"passed": false, "request": "POST /v1/chat/completions", "status": 503, "body": "{\"error\": \"no decode workers\"}"}`})
	}()
	_, _, err = s.up(ctx)
	wg.Wait()
	stopPlaying()
	require.Error(t, err)
	require.NotNil(t, failed)
	if _, diagnostics, ok := strings.Cut(s.log.String(), "Diagnostics:"); ok {
		t.Logf("what the failed up reports:%s", diagnostics[:min(len(diagnostics), 1500)])
	}
	assert.NotEqual(t, job.Name, failed.Name, "a new Job for the new generation")
	assert.Contains(t, s.log.String(), "[BackoffLimitExceeded]")
	assert.Contains(t, s.log.String(), `"status": 503`)
	assert.Contains(t, s.log.String(), "no decode workers")
}
