package integration

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/benchmark"
	"minimax-m3/tests/framework/rackbox"
)

// The sweep restarting through the operator (benchmark.RestartSpec, `make bench -restart-by spec`;
// the command itself: TestBoxBenchCommand), on a disagg stack on a full rack (24 GPUs):
//   - a trace whose checksum is not benchmark.traceSHA256 is refused before anything is created;
//     the right one is staged onto the claim byte for byte;
//   - per point, in the order given: the operator's restart through the stack's restart.id and
//     `up` (the real operator rolls the real Deployments), then the point's Job, whose pod runs
//     only once the operator reports that restart Completed, with its own ARTIFACT_DIR;
//   - the merged table, plot and sweep.json parsed back; progress names every phase; nothing left;
//   - then, on the same stack: a trace on the claim whose checksum is not the configured one, a
//     sweep interrupted while its point runs (its directory then refuses a new run), and a write
//     check whose pod fails (its Job's own account in the error).
func TestBoxBenchmarkSweepRestartsThroughTheOperator(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	ns := "box-bench-spec"
	line := `{"timestamp":0,"input_length":65536,"output_length":400,"hash_ids":[1,2,3]}` + "\n"
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(line), 0o644))
	traceSHA := sha256Hex(line)
	s := readyBoxStack(t, "disagg", ns, rackbox.NVL72("bench-spec").WithGPUs(24), auto.ConfigMap{
		"minimax-m3:benchmark.enabled":     {Value: "true"},
		"minimax-m3:benchmark.traceSHA256": {Value: traceSHA},
	})
	c, err := s.stack.Config(ctx)
	require.NoError(t, err)
	played := newBoxBench(t, ns)
	dyn, err := dynamic.NewForConfig(box.Config)
	require.NoError(t, err)

	// What happened, in order: each restart the sweep asks for, and the graph's restart status
	// when each point's AIPerf pod runs.
	var mu sync.Mutex
	var steps []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, s)
	}
	played.onRun(func(_ string, concurrency int) {
		// On the played AIPerf's goroutine: it records, the test goroutine asserts.
		g := &unstructured.Unstructured{}
		g.SetGroupVersionKind(graphGVK)
		if err := box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: disaggGraph}, g); err != nil {
			record(err.Error())
			return
		}
		id, _, _ := unstructured.NestedString(g.Object, "status", "restart", "observedID")
		phase, _, _ := unstructured.NestedString(g.Object, "status", "restart", "phase")
		record(fmt.Sprintf("job c=%d restart=%s/%s", concurrency, id, phase))
	})
	events := &sweepEvents{}
	out := t.TempDir()
	sweep := &benchmark.Sweep{
		Config: &c, Namespace: ns, Kube: played.kube, Dynamic: dyn,
		Exec: benchmark.PodExecutor{Config: box.Config, Client: played.kube},
		Restart: func(ctx context.Context, id string) error {
			record("restart " + id)
			return s.stack.Restart(ctx, id, "Parallel", optup.ProgressStreams(s.log))
		},
		RestartBy:   benchmark.RestartSpec,
		Concurrency: []int{32, 16}, RunID: "run1", OutDir: out, StageTrace: trace, Heartbeat: time.Second,
		Progress: events.add,
	}

	// A trace whose checksum is not the configured one is refused before anything is created.
	wrong := filepath.Join(t.TempDir(), "other.jsonl")
	require.NoError(t, os.WriteFile(wrong, []byte("{}\n"), 0o644))
	bad := *sweep
	bad.StageTrace, bad.Progress = wrong, nil
	_, err = bad.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "but benchmark.traceSHA256 is "+traceSHA+": not staging it")
	assert.NoFileExists(t, filepath.Join(played.claim, c.Benchmark.TraceFile))

	res, err := sweep.Run(ctx)
	require.NoError(t, err, s.log.String())

	staged, err := os.ReadFile(filepath.Join(played.claim, c.Benchmark.TraceFile))
	require.NoError(t, err)
	assert.Equal(t, traceSHA, sha256Hex(string(staged)), "the trace is on the claim, byte for byte")
	mu.Lock()
	assert.Equal(t, []string{
		"restart bench-run1-c32", "job c=32 restart=bench-run1-c32/Completed",
		"restart bench-run1-c16", "job c=16 restart=bench-run1-c16/Completed",
	}, steps, "each point's pod ran only once the operator had completed that point's restart")
	mu.Unlock()
	for _, p := range []string{"c32", "c16"} {
		assert.DirExists(t, filepath.Join(played.claim, c.Benchmark.ArtifactDirectory, "run1", p), "one ARTIFACT_DIR per point")
	}

	// The restarts went through the stack: its config and the live graph have the last ID.
	cfg, err := s.stack.GetConfigWithOptions(ctx, "minimax-m3:restart.id", &auto.ConfigOptions{Path: true})
	require.NoError(t, err)
	assert.Equal(t, "bench-run1-c16", cfg.Value)
	g := boxGraph(t, ns, disaggGraph)
	id, _, _ := unstructured.NestedString(g.Object, "spec", "restart", "id")
	assert.Equal(t, "bench-run1-c16", id)

	// Each point's artifacts were copied out; the merged table has every point by concurrency.
	for _, p := range []string{"c16", "c32"} {
		for _, f := range []string{benchmark.SummaryFile, benchmark.RecordsFile, "logs/aiperf.log"} {
			assert.FileExists(t, filepath.Join(out, p, f))
		}
	}
	require.Len(t, res.Points, 2)
	rows := csvRows(t, out)
	require.Len(t, rows, 3)
	assert.Equal(t, benchmark.Header(false), rows[0])
	assert.Equal(t, []string{"16", "real", "ok", "3", "0"}, rows[1][:5])
	assert.Equal(t, "32", rows[2][0])
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "| 32 | real | ok |")

	// The plot, parsed back: one point per concurrency at (per-user tokens/s, output tokens/s per GPU).
	var plot struct {
		Circles []struct {
			Concurrency int     `xml:"data-concurrency,attr"`
			PerUser     float64 `xml:"data-per-user,attr"`
			PerGPU      float64 `xml:"data-per-gpu,attr"`
			Mode        string  `xml:"data-speculative-mode,attr"`
		} `xml:"circle"`
	}
	svg, err := os.ReadFile(filepath.Join(out, "results.svg"))
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(svg, &plot))
	require.Len(t, plot.Circles, 2, string(svg))
	assert.Equal(t, 32, plot.Circles[1].Concurrency)
	assert.Equal(t, "real", plot.Circles[1].Mode)
	// AIPerf's figures at c=32 (package aiperfexport): output 100·c tokens/s, 2000/c per user.
	assert.InDelta(t, 3200.0/24, plot.Circles[1].PerGPU, 0.01, "output tokens/s over the stack's 24 GPUs")
	assert.InDelta(t, 2000.0/32, plot.Circles[1].PerUser, 0.01)

	var meta benchmark.Metadata
	metaJSON, err := os.ReadFile(filepath.Join(out, "sweep.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(metaJSON, &meta))
	assert.Equal(t, "real", meta.SpeculativeMode)
	assert.True(t, meta.RestartedBetweenPoints)
	assert.Equal(t, "spec", meta.RestartedBy)
	assert.Equal(t, 24, meta.GPUs)
	assert.Equal(t, []int{32, 16}, meta.Concurrency)
	assert.True(t, meta.Complete)
	assert.Len(t, meta.Points, 2)

	var phases []string
	for _, e := range events.list() {
		if e.Done {
			phases = append(phases, fmt.Sprintf("%d:%s", e.Concurrency, e.Phase))
		}
	}
	assert.Equal(t, []string{"0:lease", "0:helper", "0:stage", "0:write-check", "0:write-check", "0:results",
		"32:restart", "32:benchmark", "32:benchmark", "32:fetch", "0:results",
		"16:restart", "16:benchmark", "16:benchmark", "16:fetch", "0:results",
		"0:results", "0:cleanup"}, phases, "phase ends, the deletions of the check's and each point's Job and of the helper, and the results after each point and at the end")
	boxBenchLeftovers(t, played.kube, ns, disaggGraph)

	// The trace on the claim is checked even when the sweep does not stage it.
	other := *sweep
	otherConfig := c
	otherConfig.Benchmark.TraceSHA256 = sha256Hex("{}\n")
	other.Config, other.StageTrace, other.NoRestart, other.Concurrency = &otherConfig, "", true, []int{8}
	other.RunID, other.OutDir = "stop", t.TempDir()
	_, err = other.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the trace on the claim (/model-cache/"+c.Benchmark.TraceFile+") has SHA-256 "+traceSHA)

	// Interrupted while its point's pod runs: the Job and the helper pod are deleted, and the
	// directory, holding the run's sweep.json, refuses another run.
	stopped := other
	stopped.Config = &c
	runCtx, interrupt := context.WithCancel(ctx)
	played.onRun(func(run string, _ int) {
		if run == "stop" {
			interrupt()
		}
	})
	_, err = stopped.Run(runCtx)
	require.ErrorIs(t, err, context.Canceled)
	boxBenchLeftovers(t, played.kube, ns, disaggGraph)
	_, err = stopped.Run(ctx)
	require.ErrorContains(t, err, "holds sweep stop already: resume it (-resume) or choose another output directory")

	// A write check whose pod fails stops the sweep with its Job's own account of it.
	failing := stopped
	failingConfig := c
	failingConfig.Benchmark.Image = rackbox.FailingImage
	failing.Config, failing.RunID, failing.OutDir = &failingConfig, "denied", t.TempDir()
	_, err = failing.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write-check: Job "+disaggGraph+"-bench-write-check failed: BackoffLimitExceeded")
	assert.Contains(t, err.Error(), "exit status 1 (the box's FailingImage)", "the pod's termination message")
	boxBenchLeftovers(t, played.kube, ns, disaggGraph)
}
