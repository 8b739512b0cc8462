package integration

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/dynamic"

	"minimax-m3/benchmark"
	"minimax-m3/tests/framework/aiperfexport"
	"minimax-m3/tests/framework/rackbox"
)

// The benchmark sweep on a full rack (12 GPUs, agg), restarts the recipe's way between points:
//   - an uninterrupted sweep: each point's artifacts (AIPerf's summary, records and log) fetched,
//     progress in requests out of the trace's, the run's identity in sweep.json, the Lease
//     released; a second sweep in the namespace meanwhile is refused with the first one's run ID,
//     and takes nothing of it;
//   - a sweep interrupted in its third point resumes, runs only that point, and ends with the same
//     table as the uninterrupted one;
//   - a point where a fifth of the requests failed shows them and fails the sweep under a 1%
//     budget;
//   - the two sweeps compare in one table and one plot.
func TestBoxBenchmarkSweepResumesComparesAndFailsOverBudget(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-bench-sweep"
	trace := "{\"timestamp\":0,\"input_length\":65536,\"output_length\":400,\"hash_ids\":[1]}\n" +
		"{\"timestamp\":1,\"input_length\":65536,\"output_length\":400,\"hash_ids\":[1,2]}\n" +
		"{\"timestamp\":2,\"input_length\":65536,\"output_length\":400,\"hash_ids\":[1,2,3]}\n"
	traceFile := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(traceFile, []byte(trace), 0o644))
	s := readyBoxStack(t, "agg", ns, rackbox.NVL72("bench-sweep").WithGPUs(12), auto.ConfigMap{
		"minimax-m3:benchmark.enabled":                    {Value: "true"},
		"minimax-m3:benchmark.traceSHA256":                {Value: sha256Hex(trace)},
		"minimax-m3:benchmark.goodput.timeToFirstTokenMs": {Value: "2000"},
	})
	c, err := s.stack.Config(ctx)
	require.NoError(t, err)
	played := newBoxBench(t, ns)
	kube := played.kube
	dyn, err := dynamic.NewForConfig(box.Config)
	require.NoError(t, err)
	podExec := benchmark.PodExecutor{Config: box.Config, Client: kube}

	newSweep := func(run, out string, ev *sweepEvents) *benchmark.Sweep {
		return &benchmark.Sweep{
			Config: &c, Namespace: ns, Kube: kube, Dynamic: dyn, Exec: podExec,
			Concurrency: []int{4, 8, 16}, RunID: run, OutDir: out, StageTrace: traceFile, ErrorBudget: 0.01,
			Stack: "agg", ProgramCommit: "0123abc", Heartbeat: 500 * time.Millisecond, Progress: ev.add,
		}
	}

	// The uninterrupted sweep; a second one tries to start while its first point runs.
	whole, wholeEvents := t.TempDir(), &sweepEvents{}
	var busyErr error
	played.onRun(func(run string, concurrency int) {
		if run != "whole" || concurrency != 4 {
			return
		}
		// A second sweep in the namespace is refused at once, touching nothing of the first.
		_, busyErr = newSweep("other", t.TempDir(), &sweepEvents{}).Run(ctx)
		// The point's progress shows the requests AIPerf has recorded (its warmup left out).
		// (This runs on the played AIPerf's goroutine: it reports, the test goroutine asserts.)
		deadline := time.Now().Add(time.Minute)
		for !wholeEvents.has("AIPerf: 3 of 3 requests done") && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	})
	res, err := newSweep("whole", whole, wholeEvents).Run(ctx)
	require.NoError(t, err)
	assert.True(t, wholeEvents.has("AIPerf: 3 of 3 requests done"), "progress in requests out of the trace's")
	var busy *benchmark.BusyError
	require.ErrorAs(t, busyErr, &busy)
	assert.Equal(t, "whole", busy.RunID)
	assert.Contains(t, busyErr.Error(), "sweep whole (graph "+aggGraph+") is running in namespace "+ns)
	require.Len(t, res.Points, 3)
	for _, p := range []int{4, 8, 16} {
		for _, f := range []string{benchmark.SummaryFile, benchmark.RecordsFile, "logs/aiperf.log"} {
			assert.FileExists(t, filepath.Join(whole, fmt.Sprintf("c%d", p), f))
		}
	}
	meta, err := benchmark.LoadMetadata(whole)
	require.NoError(t, err)
	assert.True(t, meta.Complete)
	assert.Equal(t, "0123abc", meta.ProgramCommit)
	assert.Equal(t, "0.12.0", meta.AIPerfVersion)
	assert.Equal(t, 3, meta.TraceRequests)
	assert.Equal(t, 12, meta.GPUs)
	assert.Equal(t, map[string]float64{"time_to_first_token": 2000}, meta.Goodput)
	var components []string
	for _, ci := range meta.Components {
		components = append(components, ci.Component+"="+ci.Image)
	}
	assert.Equal(t, []string{"Frontend=" + c.Image, "Worker=" + c.Image}, components, "the images the graph's pods run")
	wholeRows := csvRows(t, whole)
	require.Len(t, wholeRows, 4)
	assert.Equal(t, []string{"4", "real", "ok", "3", "0"}, wholeRows[1][:5])
	assert.Equal(t, "0.20", wholeRows[1][18], "goodput, with benchmark.goodput's SLO")
	boxBenchLeftovers(t, kube, ns, aggGraph)

	// Interrupted in its third point, then resumed: only that point runs again.
	cut := t.TempDir()
	runCtx, interrupt := context.WithCancel(ctx)
	played.onRun(func(run string, concurrency int) {
		if run == "cut" && concurrency == 16 {
			interrupt()
		}
	})
	_, err = newSweep("cut", cut, &sweepEvents{}).Run(runCtx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Len(t, csvRows(t, cut), 3, "the two points done are written")
	boxBenchLeftovers(t, kube, ns, aggGraph)

	played.onRun(nil)
	resumed := newSweep("cut", cut, &sweepEvents{})
	resumed.Resume, resumed.PruneClaim = true, true
	_, err = resumed.Run(ctx)
	require.NoError(t, err)
	// -prune-claim: the run's directory on the claim is gone once its artifacts are all local;
	// another run's stays.
	assert.NoDirExists(t, filepath.Join(played.claim, c.Benchmark.ArtifactDirectory, "cut"))
	assert.DirExists(t, filepath.Join(played.claim, c.Benchmark.ArtifactDirectory, "whole", "c16"))
	assert.Equal(t, wholeRows, csvRows(t, cut), "the same table as the uninterrupted sweep")
	assert.Equal(t, []string{"cut c=4", "cut c=8", "cut c=16", "cut c=16"}, slices.DeleteFunc(played.runs(), func(r string) bool { return !strings.HasPrefix(r, "cut ") }),
		"the resumed sweep ran only the interrupted point")
	cutMeta, err := benchmark.LoadMetadata(cut)
	require.NoError(t, err)
	assert.True(t, cutMeta.Complete)
	assert.Len(t, cutMeta.Resumed, 1)

	// Resuming under other conditions is refused before anything runs.
	other := newSweep("cut", cut, &sweepEvents{})
	other.Resume, other.ErrorBudget = true, 0.5
	_, err = other.Run(ctx)
	require.ErrorContains(t, err, "ran under other conditions, so its points and this run's would not compare: error budget was 0.01, is 0.5")

	// A fifth of c=8's requests fail: the point shows them and fails the sweep.
	played.mu.Lock()
	played.outcome[8] = aiperfexport.Point{Requests: 8, Errors: 2}
	played.mu.Unlock()
	failing := t.TempDir()
	_, err = newSweep("errors", failing, &sweepEvents{}).Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "point c=8 failed: 2 of 10 requests failed (20.0%), over the error budget of 1%; most often (2): 503 Service Unavailable no worker available")
	rows := csvRows(t, failing)
	require.Len(t, rows, 3)
	assert.Equal(t, []string{"8", "real", "FAILED: 2 of 10 requests failed (20.0%), over the error budget of 1%; most often (2): 503 Service Unavailable no worker available", "8", "2", "20.00"}, rows[2][:6])
	md, err := os.ReadFile(filepath.Join(failing, "results.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "Failed requests at c=8:\n- 2 × 503 Service Unavailable no worker available")
	boxBenchLeftovers(t, kube, ns, aggGraph)

	// The two sweeps side by side.
	cmp := t.TempDir()
	_, err = benchmark.Compare([]string{whole, failing}, cmp)
	require.NoError(t, err)
	f, err := os.Open(filepath.Join(cmp, "compare.csv"))
	require.NoError(t, err)
	cmpRows, err := csv.NewReader(f).ReadAll()
	_ = f.Close()
	require.NoError(t, err)
	require.Len(t, cmpRows, 6)
	assert.Equal(t, []string{"agg whole (real)", "12", "4"}, cmpRows[1][:3])
	assert.Equal(t, []string{"agg errors (real) [incomplete]", "12", "8"}, cmpRows[5][:3])
	assert.FileExists(t, filepath.Join(cmp, "compare.svg"))
}
