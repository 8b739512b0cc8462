package integration

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/benchmark"
	"minimax-m3/config"
	"minimax-m3/tests/framework/aiperfexport"
	"minimax-m3/tests/framework/rackbox"
)

// boxBench is what the benchmark sweep's box tests play around the box. Everything else is real:
// the scheduler places the helper pod and each AIPerf Job's pod (beside the frontend), the Job
// controller runs the write check and the points, the restarts (the recipe's: deleting the
// graph's pods; or the operator's, through spec.restart) are the controllers' and the Dynamo
// operator's, and each exec goes through the API server's exec subresource to the node's kubelet
// endpoint (rackbox: the box's, with the kubelet's own streaming library).
//   - AIPerf (it needs a served model): when a point's pod runs, the test writes what AIPerf
//     0.12 leaves in ARTIFACT_DIR (package aiperfexport: its summary, records and log, in its own
//     format) into the claim's directory, then sets the pod's exit code (rackbox.ExitCodeAnnotation):
//     only then does kwok end the pod;
//   - the helper's container (no container runtime here): the command the kubelet is asked to run
//     runs on this machine, with the claim's mount a local directory.
type boxBench struct {
	t     *testing.T
	ns    string
	claim string
	kube  kubernetes.Interface

	mu sync.Mutex
	// outcome plays each concurrency's AIPerf run (by default every request succeeds).
	outcome map[int]aiperfexport.Point
	// ran lists the AIPerf runs, "<run> c=<N>"; before, when set, runs before a point's pod ends.
	ran    []string
	before func(run string, concurrency int)
}

// exec is what the container runtime would run in the helper pod (the box's kubelet endpoint
// calls it for every exec into the namespace's pods): the command, on this machine, with the
// claim's mount mapped to the local directory.
func (b *boxBench) exec(ctx context.Context, p *corev1.Pod, container string, command []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if container != "helper" || p.Labels["minimax-m3.io/benchmark-step"] != "helper" {
		return fmt.Errorf("exec in %s[%s]: not the helper", p.Name, container)
	}
	args := make([]string, len(command))
	for i, a := range command {
		args[i] = strings.ReplaceAll(a, config.BenchmarkMountPath, b.claim)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// Once ctx ends (the box stops), the command's streams are not waited for long.
	cmd.WaitDelay = 5 * time.Second
	return cmd.Run()
}

// newBoxBench plays AIPerf and the helper's container in ns until the test ends.
func newBoxBench(t *testing.T, ns string) *boxBench {
	kube, err := kubernetes.NewForConfig(box.Config)
	require.NoError(t, err)
	played := &boxBench{t: t, ns: ns, claim: t.TempDir(), kube: kube, outcome: map[int]aiperfexport.Point{}}
	t.Cleanup(box.HandleExec(ns, played.exec))
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		played.playAIPerf(ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-stopped
	})
	return played
}

// playAIPerf plays AIPerf in every running point pod of the namespace until ctx is done.
func (b *boxBench) playAIPerf(ctx context.Context) {
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := box.Client.List(ctx, &pods, client.InNamespace(b.ns), client.HasLabels{rackbox.HeldLabel}); err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				// A point's AIPerf pod: its Job's, with a concurrency (the run's helper pod carries the
				// run's label too).
				if p.Labels["batch.kubernetes.io/job-name"] == "" || p.Status.Phase != corev1.PodRunning ||
					p.Annotations[rackbox.ExitCodeAnnotation] != "" || p.DeletionTimestamp != nil {
					continue
				}
				b.run(ctx, p)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (b *boxBench) run(ctx context.Context, p *corev1.Pod) {
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	c, err := strconv.Atoi(env["CONCURRENCY"])
	if err != nil || c < 1 {
		b.t.Errorf("playing AIPerf: pod %s has no concurrency: %q", p.Name, env["CONCURRENCY"])
		return
	}
	run := p.Labels[rackbox.HeldLabel]
	b.mu.Lock()
	point, ok := b.outcome[c]
	before := b.before
	b.ran = append(b.ran, fmt.Sprintf("%s c=%d", run, c))
	b.mu.Unlock()
	if !ok {
		point = aiperfexport.Point{Requests: 3}
	}
	point.Concurrency, point.Goodput = c, true
	dir := strings.ReplaceAll(env["ARTIFACT_DIR"], config.BenchmarkMountPath, b.claim)
	if err := aiperfexport.Write(dir, point); err != nil {
		b.t.Errorf("playing AIPerf: %v", err)
		return
	}
	if before != nil {
		before(run, c)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Annotations = map[string]string{rackbox.ExitCodeAnnotation: "0"}
	// An interrupted sweep may have deleted the pod meanwhile.
	if err := box.Client.Patch(ctx, p, patch); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
		b.t.Errorf("ending the AIPerf pod %s: %v", p.Name, err)
	}
}

// onRun sets what runs when a point's AIPerf pod runs, before it ends (nil: nothing).
func (b *boxBench) onRun(f func(run string, concurrency int)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.before = f
}

func (b *boxBench) runs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ran)
}

// sweepEvents collects a sweep's progress.
type sweepEvents struct {
	mu  sync.Mutex
	all []benchmark.Event
}

func (e *sweepEvents) add(ev benchmark.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *sweepEvents) list() []benchmark.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.all)
}

func (e *sweepEvents) has(substr string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.all, func(ev benchmark.Event) bool { return strings.Contains(ev.String(), substr) })
}

// csvRows reads a sweep's results.csv.
func csvRows(t *testing.T, dir string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "results.csv"))
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return rows
}

// boxBenchLeftovers asserts that no sweep object is left: the Lease, the Jobs, the helper.
func boxBenchLeftovers(t *testing.T, kube kubernetes.Interface, ns, graph string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx := context.Background()
		jobs, err := kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=benchmark"})
		require.NoError(c, err)
		assert.Empty(c, jobs.Items)
		_, err = kube.CoreV1().Pods(ns).Get(ctx, graph+"-bench-helper", metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "helper pod deleted")
		_, err = kube.CoordinationV1().Leases(ns).Get(ctx, benchmark.LeaseName, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "Lease released")
	}, time.Minute, 250*time.Millisecond)
}

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
	t.Parallel()
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

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
