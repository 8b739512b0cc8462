package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/framework/rackbox"
)

// The smoke test in the rack box: its Job is created only once the real operator has made the
// graph Ready, runs on the box's nodes, and `up` returns its result as a stack output. A new graph
// generation runs a new Job, and a failing one fails `up` at once with the Job controller's reason
// and the response's status and body. No model runs here: the smoke test's pod ends with the
// result its script would write (a kwok stage: passed, or HTTP 503 for the box's FailingImage).
func TestBoxSmokeTestRunsAfterTheGraphIsReadyAndReportsItsResult(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-smoke-test"
	s := newBoxStack(t, "agg", ns, addRack(t, rackbox.NVL72("smoke").WithGPUs(12)), nil)
	res, _, err := s.up(ctx)
	require.NoError(t, err, s.log.String())

	smoke, _ := res.Outputs["smokeTest"].Value.(map[string]any)
	name, _ := smoke["job"].(string)
	require.NotEmpty(t, name, "the output names the smoke test's Job: %v", res.Outputs["smokeTest"].Value)
	var job batchv1.Job
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job))
	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(graphGVK)
	require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: aggGraph}, g))
	assert.False(t, job.CreationTimestamp.Time.Before(readySince(t, g)), "the smoke test Job is created only once the graph is Ready (Job %s, Ready %s)",
		job.CreationTimestamp.Time, readySince(t, g))
	assert.Equal(t, true, smoke["passed"])
	assert.EqualValues(t, 200, smoke["status"])
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "http://"+aggGraph+"-frontend:8000", env["SMOKE_TEST_URL"])
	assert.Equal(t, "nvidia/MiniMax-M3-NVFP4", env["SMOKE_TEST_MODEL"])

	// Nothing changed: nothing runs again, and the output reads the same.
	_, err = s.preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, s.log.String())

	// A vLLM flag is a new graph generation: a new smoke test Job runs (here one whose request
	// gets 503), and `up` fails at once with the Job's reason and the response among its messages.
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeqs", "32")
	s.set(ctx, "minimax-m3:smokeTest.image", rackbox.FailingImage)
	_, _, err = s.up(ctx)
	require.Error(t, err)
	if _, diagnostics, ok := strings.Cut(s.log.String(), "Diagnostics:"); ok {
		t.Logf("what the failed up reports:%s", diagnostics[:min(len(diagnostics), 1500)])
	}
	var jobs batchv1.JobList
	require.NoError(t, box.Client.List(ctx, &jobs, client.InNamespace(ns)))
	var newJobs []string
	for _, j := range jobs.Items {
		if strings.Contains(j.Name, "-smoke-") && j.Name != job.Name {
			newJobs = append(newJobs, j.Name)
		}
	}
	assert.NotEmpty(t, newJobs, "a new Job for the new generation")
	assert.Contains(t, s.log.String(), "[BackoffLimitExceeded]")
	assert.Contains(t, s.log.String(), `"status": 503`)
	assert.Contains(t, s.log.String(), "no model runs here")
	assert.NotContains(t, s.log.String(), "timed out")
}

// readySince is when the graph's Ready condition last became True.
func readySince(t *testing.T, g *unstructured.Unstructured) (since time.Time) {
	t.Helper()
	conds, _, _ := unstructured.NestedSlice(g.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			ts, _ := m["lastTransitionTime"].(string)
			since, err := time.Parse(time.RFC3339, ts)
			require.NoError(t, err)
			return since
		}
	}
	t.Fatal("the graph is not Ready")
	return since
}
