package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
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
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/benchmark"
	"minimax-m3/config"
	"minimax-m3/tests/aiperfexport"
)

const disaggGraph = "minimax-m3-disagg-gb200-agentic"

// benchWorld is what the benchmark sweep's tests play around the real API server, the real stack
// and the real Dynamo operator (its restarts through spec.restart): the Deployment controller and
// the garbage collector (the operator's Deployments ready), the Job controller and AIPerf (a
// point's Job writes what AIPerf 0.12 leaves in its ARTIFACT_DIR, package aiperfexport, then
// completes), the scheduler and the kubelet (the helper pod is bound to a Node whose kubelet
// endpoint is served here, kubelet_test.go, and becomes Ready; exec, through the API server, runs
// the command on this machine with the claim as a local directory). The rack box runs the sweep
// with the real controllers, scheduler and restarts the recipe's way (box_bench_test.go); here the
// exec goes through the API server, as cmd/bench's does.
type benchWorld struct {
	t       *testing.T
	api     *apiServer
	ns      string
	claim   string // the model cache claim's contents
	kube    kubernetes.Interface
	kubelet *playedKubelet

	mu  sync.Mutex
	log []string // what happened, in order
	// hold leaves benchmark Jobs running (for the interrupt test); failWriteCheck fails the check.
	hold, failWriteCheck bool
	artifactDirs         []string
}

func (w *benchWorld) record(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, s)
}

func (w *benchWorld) events() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}

// onClaim maps a path of the helper's or a Job's /model-cache mount to the local directory.
func (w *benchWorld) onClaim(p string) string {
	if rest, ok := strings.CutPrefix(p, config.BenchmarkMountPath); ok {
		return w.claim + rest
	}
	return p
}

// runInContainer is what the played kubelet runs for an exec in the helper pod: the command, on
// this machine, with the claim's mount mapped to the local directory.
func (w *benchWorld) runInContainer(ctx context.Context, pod, container string, command []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if container != "helper" || !strings.HasSuffix(pod, "-bench-helper") {
		return fmt.Errorf("exec in %s[%s]: not the helper", pod, container)
	}
	args := make([]string, len(command))
	for i, a := range command {
		args[i] = w.onClaim(a)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	w.record("exec " + strings.Join(command[:min(len(command), 2)], " "))
	return cmd.Run()
}

// play runs the controllers until ctx is done.
func (w *benchWorld) play(ctx context.Context) {
	for ctx.Err() == nil {
		playDeployments(ctx, w.t, w.api.client, w.ns)
		playForegroundGC(ctx, w.t, w.api.client, w.ns)
		w.playHelperPod(ctx)
		w.playJobs(ctx)
		time.Sleep(100 * time.Millisecond)
	}
}

// playHelperPod plays the scheduler (binding the helper pod to the played kubelet's Node) and the
// kubelet (the pod runs and is Ready; a deleted pod stops).
func (w *benchWorld) playHelperPod(ctx context.Context) {
	var pods corev1.PodList
	if err := w.api.client.List(ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{"minimax-m3.io/benchmark-step": "helper"}); err != nil {
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil && p.Spec.NodeName != "" {
			// The kubelet stops the pod's containers and confirms the deletion.
			zero := int64(0)
			if err := w.kube.CoreV1().Pods(w.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err == nil {
				w.record("helper stopped")
			}
			continue
		}
		if p.Status.Phase == corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		if p.Spec.NodeName == "" {
			if err := w.kubelet.bind(ctx, w.kube, p); err != nil && ctx.Err() == nil {
				w.t.Logf("playing the scheduler: %v", err)
			}
			continue
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		if err := w.api.client.Status().Update(ctx, p); err == nil {
			w.record("helper ready on " + p.Spec.NodeName)
		}
	}
}

func (w *benchWorld) playJobs(ctx context.Context) {
	var jobs batchv1.JobList
	if err := w.api.client.List(ctx, &jobs, client.InNamespace(w.ns)); err != nil {
		return
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if len(j.Status.Conditions) > 0 || j.DeletionTimestamp != nil {
			continue
		}
		env := map[string]string{}
		for _, e := range j.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		failed := false
		switch {
		case j.Labels["minimax-m3.io/benchmark-step"] == "write-check":
			w.mu.Lock()
			fail := w.failWriteCheck
			w.mu.Unlock()
			if fail {
				failed = true
				w.playTerminatedPod(ctx, j, "uid=1000 gid=1000 groups=1000\nmkdir: cannot create directory '"+env["ARTIFACT_DIR"]+"': Permission denied")
			} else {
				if err := os.MkdirAll(w.onClaim(env["ARTIFACT_DIR"]), 0o755); err != nil {
					w.t.Errorf("playing the write check: %v", err)
				}
			}
			w.record("write-check " + env["ARTIFACT_DIR"])
		case j.Labels["app.kubernetes.io/component"] == "benchmark":
			w.record(fmt.Sprintf("job c=%s restart=%s", env["CONCURRENCY"], w.restartState(ctx)))
			w.mu.Lock()
			hold := w.hold
			w.mu.Unlock()
			if hold {
				continue
			}
			w.mu.Lock()
			w.artifactDirs = append(w.artifactDirs, env["ARTIFACT_DIR"])
			w.mu.Unlock()
			c, _ := strconv.Atoi(env["CONCURRENCY"])
			if err := aiperfexport.Write(w.onClaim(env["ARTIFACT_DIR"]), aiperfexport.Point{Concurrency: c, Requests: 10}); err != nil {
				w.t.Errorf("playing AIPerf: %v", err)
			}
		}
		if err := finishJob(ctx, w.api.client, j, failed); err != nil && ctx.Err() == nil {
			w.t.Logf("playing the Job controller: %v", err)
		}
	}
}

// playTerminatedPod plays the kubelet's pod of a Job that ended with this termination message. It
// runs on the played world's goroutine: it reports what fails with t.Errorf.
func (w *benchWorld) playTerminatedPod(ctx context.Context, j *batchv1.Job, message string) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-pod", Namespace: j.Namespace,
		Labels: map[string]string{"batch.kubernetes.io/job-name": j.Name}}, Spec: *j.Spec.Template.Spec.DeepCopy()}
	if err := w.api.client.Create(ctx, pod); err != nil {
		w.t.Errorf("playing the kubelet: %v", err)
		return
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "aiperf", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: message, StartedAt: now, FinishedAt: now}}}}
	if err := w.api.client.Status().Update(ctx, pod); err != nil {
		w.t.Errorf("playing the kubelet: %v", err)
	}
}

// restartState is the graph's restart status as a Job sees it when it starts.
func (w *benchWorld) restartState(ctx context.Context) string {
	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(graphGVK)
	if err := w.api.client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: disaggGraph}, g); err != nil {
		return err.Error()
	}
	id, _, _ := unstructured.NestedString(g.Object, "status", "restart", "observedID")
	phase, _, _ := unstructured.NestedString(g.Object, "status", "restart", "phase")
	return id + "/" + phase
}

// newBenchWorld plays the world around a sweep in a namespace, with a kubelet of its own.
func newBenchWorld(t *testing.T, api *apiServer, ns string) (*benchWorld, *rest.Config) {
	cfg, err := clientcmd.BuildConfigFromFlags("", api.kubeconfig)
	require.NoError(t, err)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	w := &benchWorld{t: t, api: api, ns: ns, claim: t.TempDir(), kube: kube}
	w.kubelet = startKubelet(t, kube, "kubelet-"+ns, w.runInContainer)
	return w, cfg
}

// kubeClients are typed and dynamic clients of a local API server, as cmd/bench makes them.
func kubeClients(t *testing.T, kubeconfig string) (kubernetes.Interface, dynamic.Interface) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	return kube, dyn
}

// benchRun is a deployed disagg stack with the benchmark enabled, the world its sweep runs in and
// the sweep (a trace to stage, run ID run1, heartbeats every second).
type benchRun struct {
	trace, traceSHA, out string
	config               config.Config
	world                *benchWorld
	stack                *testStack
	sweep                *benchmark.Sweep

	mu     sync.Mutex
	events []benchmark.Event
}

// upWithRealOperator brings a stack up with the real Dynamo operator (startPlainOperator, running until
// the test ends), playing what no process here does beside it (playCluster).
func upWithRealOperator(t *testing.T, api *apiServer, s *testStack) {
	t.Helper()
	startPlainOperator(t, api)
	stop := playCluster(t, api.client, s.ns)
	defer stop()
	_, _, err := s.up(context.Background())
	require.NoError(t, err, s.log.String())
}

// newBenchRun deploys the stack in ns with the real operator and starts playing the world.
func newBenchRun(t *testing.T, api *apiServer, ns string) *benchRun {
	ctx := context.Background()
	b := &benchRun{trace: filepath.Join(t.TempDir(), "trace.jsonl"), out: t.TempDir()}
	line := `{"timestamp":0,"input_length":65536,"output_length":400,"hash_ids":[1,2,3]}` + "\n"
	require.NoError(t, os.WriteFile(b.trace, []byte(line), 0o644))
	sum := sha256.Sum256([]byte(line))
	b.traceSHA = hex.EncodeToString(sum[:])

	b.stack = makeStack(t, api.kubeconfig, "disagg", ns, auto.ConfigMap{
		"minimax-m3:benchmark.enabled":     {Value: "true"},
		"minimax-m3:benchmark.traceSHA256": {Value: b.traceSHA},
	}, api.client)
	upWithRealOperator(t, api, b.stack)
	var err error
	b.config, err = b.stack.stack.Config(ctx)
	require.NoError(t, err)

	world, restConfig := newBenchWorld(t, api, ns)
	b.world = world
	playCtx, stopPlaying := context.WithCancel(ctx)
	t.Cleanup(stopPlaying)
	go world.play(playCtx)

	kube, dyn := kubeClients(t, api.kubeconfig)
	b.sweep = &benchmark.Sweep{
		Config: &b.config, Namespace: ns, Kube: kube, Dynamic: dyn, Exec: benchmark.PodExecutor{Config: restConfig, Client: kube},
		Restart: func(ctx context.Context, id string) error {
			world.record("restart " + id)
			return b.stack.stack.Restart(ctx, id, "Parallel", optup.ProgressStreams(b.stack.log))
		},
		// The operator's restart through spec.restart; the recipe's way (RestartPods, the
		// default) runs in the rack box (box_bench_test.go).
		RestartBy: benchmark.RestartSpec,
		RunID:     "run1", OutDir: b.out, StageTrace: b.trace, Heartbeat: time.Second,
		Progress: func(e benchmark.Event) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.events = append(b.events, e)
		},
	}
	return b
}

func (b *benchRun) progress() []benchmark.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]benchmark.Event(nil), b.events...)
}

func (b *benchRun) resetProgress() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = nil
}

// sweepSteps are the write check, restarts and Jobs of the world's log, in order.
func sweepSteps(w *benchWorld) []string {
	var steps []string
	for _, e := range w.events() {
		if strings.HasPrefix(e, "restart ") || strings.HasPrefix(e, "job ") || strings.HasPrefix(e, "write-check ") {
			steps = append(steps, e)
		}
	}
	return steps
}

// The sweep, through the package cmd/bench runs, on a deployed disagg stack with the real
// operator: the trace staged after its checksum, the write check, then per point (in the order
// given) the operator's restart through the stack's restart.id and `up`, one Job with its own
// ARTIFACT_DIR started only once the operator reports that restart Completed, its artifacts
// copied out; the merged table and plot parsed back; nothing left behind.
func benchmarkSweep(t *testing.T, api *apiServer) {
	ctx := context.Background()
	b := newBenchRun(t, api, "bench")
	traceSHA, c, world, s, sweep, out := b.traceSHA, b.config, b.world, b.stack, b.sweep, b.out
	sweep.Concurrency = []int{32, 16, 64}

	// A trace whose checksum is not the configured one is refused before anything is created.
	wrong := filepath.Join(t.TempDir(), "other.jsonl")
	require.NoError(t, os.WriteFile(wrong, []byte("{}\n"), 0o644))
	bad := *sweep
	bad.StageTrace = wrong
	_, err := bad.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "but benchmark.traceSHA256 is "+traceSHA+": not staging it")
	assert.NoFileExists(t, filepath.Join(world.claim, c.Benchmark.TraceFile))

	b.resetProgress()
	res, err := sweep.Run(ctx)
	require.NoError(t, err, s.log.String())

	// The trace is on the claim, byte for byte.
	staged, err := os.ReadFile(filepath.Join(world.claim, c.Benchmark.TraceFile))
	require.NoError(t, err)
	assert.Equal(t, traceSHA, fmt.Sprintf("%x", sha256.Sum256(staged)))

	// The order: the write check, then per point its restart (through `up`), and its Job, which
	// started only once the operator had completed that point's restart.
	assert.Equal(t, []string{
		"write-check /model-cache/aiperf-artifacts/run1",
		"restart bench-run1-c32", "job c=32 restart=bench-run1-c32/Completed",
		"restart bench-run1-c16", "job c=16 restart=bench-run1-c16/Completed",
		"restart bench-run1-c64", "job c=64 restart=bench-run1-c64/Completed",
	}, sweepSteps(world))
	assert.Equal(t, []string{"/model-cache/aiperf-artifacts/run1/c32", "/model-cache/aiperf-artifacts/run1/c16", "/model-cache/aiperf-artifacts/run1/c64"},
		world.artifactDirs, "one directory per point")

	// The restarts went through the stack: its config and the live graph have the last ID.
	cfg, err := s.stack.GetConfigWithOptions(ctx, "minimax-m3:restart.id", &auto.ConfigOptions{Path: true})
	require.NoError(t, err)
	assert.Equal(t, "bench-run1-c64", cfg.Value)
	g, _ := getOn(t, api.client, graphGVK, s.ns, disaggGraph)
	id, _, _ := unstructured.NestedString(g.Object, "spec", "restart", "id")
	assert.Equal(t, "bench-run1-c64", id)
	id, _, _ = unstructured.NestedString(g.Object, "status", "restart", "observedID")
	assert.Equal(t, "bench-run1-c64", id, "the operator's own restart status")

	// Each point's artifacts were copied out, and the merged table has every point by concurrency.
	for _, c := range []int{16, 32, 64} {
		assert.FileExists(t, filepath.Join(out, fmt.Sprintf("c%d", c), benchmark.SummaryFile))
		assert.FileExists(t, filepath.Join(out, fmt.Sprintf("c%d", c), benchmark.RecordsFile))
		assert.FileExists(t, filepath.Join(out, fmt.Sprintf("c%d", c), "logs", "aiperf.log"))
	}
	require.Len(t, res.Points, 3)
	f, err := os.Open(filepath.Join(out, "results.csv"))
	require.NoError(t, err)
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	_ = f.Close()
	require.Len(t, rows, 4)
	assert.Equal(t, benchmark.Header(false), rows[0])
	assert.Equal(t, []string{"16", "real", "ok", "10", "0", "0.00", "1.60", "1600.00", "66.67", "16000.00", "17600.00", "125.00",
		"1440.00", "3200.00", "7.20", "16.00", "14400.00", "32000.00", "", ""}, rows[1], "24 GPUs; no goodput without SLOs")
	assert.Equal(t, "32", rows[2][0])
	assert.Equal(t, "64", rows[3][0])
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "| 64 | real | ok |")

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
	require.Len(t, plot.Circles, 3, string(svg))
	assert.Equal(t, 64, plot.Circles[2].Concurrency)
	assert.InDelta(t, 2000.0/64, plot.Circles[2].PerUser, 0.01)
	assert.InDelta(t, 6400.0/24, plot.Circles[2].PerGPU, 0.01)
	assert.Equal(t, "real", plot.Circles[2].Mode)

	var meta benchmark.Metadata
	metaJSON, err := os.ReadFile(filepath.Join(out, "sweep.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(metaJSON, &meta))
	assert.Equal(t, "real", meta.SpeculativeMode)
	assert.True(t, meta.RestartedBetweenPoints)
	assert.Equal(t, "spec", meta.RestartedBy)
	assert.Equal(t, 24, meta.GPUs)
	assert.Equal(t, []int{32, 16, 64}, meta.Concurrency)
	assert.True(t, meta.Complete)
	assert.Len(t, meta.Points, 3)

	// Progress named every phase, in order, with the points.
	var phases []string
	for _, e := range b.progress() {
		if e.Done {
			phases = append(phases, fmt.Sprintf("%d:%s", e.Concurrency, e.Phase))
		}
	}
	assert.Equal(t, []string{"0:lease", "0:helper", "0:stage", "0:write-check", "0:write-check", "0:results",
		"32:restart", "32:benchmark", "32:benchmark", "32:fetch", "0:results",
		"16:restart", "16:benchmark", "16:benchmark", "16:fetch", "0:results",
		"64:restart", "64:benchmark", "64:benchmark", "64:fetch", "0:results",
		"0:results", "0:cleanup"}, phases, "phase ends, the deletions of the check's and each point's Job and of the helper, and the results after each point and at the end")

	assertNothingLeft(t, sweep.Kube, s.ns)
}

// Interrupting a sweep (its context cancelled) deletes the running Job and the helper pod; a failed
// write check stops the sweep with the Job's own account of it.
func benchmarkSweepInterruptAndFailedWriteCheck(t *testing.T, api *apiServer) {
	ctx := context.Background()
	s := makeStack(t, api.kubeconfig, "disagg", "bench-stop", auto.ConfigMap{"minimax-m3:benchmark.enabled": {Value: "true"}}, api.client)
	upWithRealOperator(t, api, s)
	c, err := s.stack.Config(ctx)
	require.NoError(t, err)
	world, restConfig := newBenchWorld(t, api, s.ns)
	world.hold = true // before playing starts
	require.NoError(t, os.MkdirAll(filepath.Dir(world.onClaim("/model-cache/"+c.Benchmark.TraceFile)), 0o755))
	require.NoError(t, os.WriteFile(world.onClaim("/model-cache/"+c.Benchmark.TraceFile), []byte("{}\n"), 0o644))
	playCtx, stopPlaying := context.WithCancel(ctx)
	defer stopPlaying()
	go world.play(playCtx)
	kube, dyn := kubeClients(t, api.kubeconfig)

	sweep := benchmark.Sweep{
		Config: &c, Namespace: s.ns, Kube: kube, Dynamic: dyn, Exec: benchmark.PodExecutor{Config: restConfig, Client: kube},
		Concurrency: []int{8}, RunID: "stop", OutDir: t.TempDir(), NoRestart: true,
	}
	// The staged trace's checksum is checked even when not staging.
	_, err = sweep.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the trace on the claim (/model-cache/"+c.Benchmark.TraceFile+") has SHA-256")
	sweep.Config.Benchmark.TraceSHA256 = ""

	runCtx, interrupt := context.WithCancel(ctx)
	go func() {
		for runCtx.Err() == nil {
			for _, e := range world.events() {
				if strings.HasPrefix(e, "job c=8") {
					interrupt()
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	_, err = sweep.Run(runCtx)
	require.ErrorIs(t, err, context.Canceled)
	assertNothingLeft(t, kube, s.ns)

	// The interrupted sweep's directory holds its sweep.json: another run is refused there.
	_, err = sweep.Run(ctx)
	require.ErrorContains(t, err, "holds sweep stop already: resume it (-resume) or choose another output directory")

	world.mu.Lock()
	world.failWriteCheck = true
	world.mu.Unlock()
	sweep.OutDir = t.TempDir()
	_, err = sweep.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write-check: Job "+disaggGraph+"-bench-write-check failed: BackoffLimitExceeded")
	assert.Contains(t, err.Error(), "Permission denied")
	assertNothingLeft(t, kube, s.ns)
}

// assertNothingLeft checks that no benchmark Job or helper pod remains.
func assertNothingLeft(t *testing.T, kube kubernetes.Interface, ns string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		jobs, err := kube.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=benchmark"})
		require.NoError(c, err)
		assert.Empty(c, jobs.Items)
		_, err = kube.CoreV1().Pods(ns).Get(context.Background(), disaggGraph+"-bench-helper", metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "helper pod deleted")
	}, 30*time.Second, 200*time.Millisecond)
}

// The command itself, as a user runs it from the project directory with the stack's backend in the
// environment: progress on the terminal, the table at the end; Ctrl-C deletes the running Job.
func benchCommand(t *testing.T, api *apiServer) {
	ctx := context.Background()
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	content := []byte(`{"timestamp":0,"input_length":1000,"output_length":10,"hash_ids":[1]}` + "\n")
	require.NoError(t, os.WriteFile(trace, content, 0o644))
	sum := sha256.Sum256(content)
	s := makeStack(t, api.kubeconfig, "disagg", "bench-cli", auto.ConfigMap{
		"minimax-m3:benchmark.enabled":     {Value: "true"},
		"minimax-m3:benchmark.traceSHA256": {Value: hex.EncodeToString(sum[:])},
	}, api.client)
	upWithRealOperator(t, api, s)
	world, _ := newBenchWorld(t, api, s.ns)
	playCtx, stopPlaying := context.WithCancel(ctx)
	defer stopPlaying()
	go world.play(playCtx)

	bin := command(t, "./cmd/bench", "bench")
	env := os.Environ()
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	results := t.TempDir()
	cmd := exec.Command(bin, "-stack", "disagg", "-concurrency", "4,2", "-trace", trace, "-run", "cli", "-out", results, "-heartbeat", "1s", "-restart-by", "spec")
	cmd.Dir, cmd.Env = s.dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stdout.String()+stderr.String())
	for _, want := range []string{
		"benchmark sweep of disagg (graph bench-cli/" + disaggGraph + ", 24 GPUs, speculative decoding real): concurrency 4,2, run cli",
		"[sweep] stage: trace /model-cache/traces/",
		"[1/2 c=4] restart: spec.restart.id=bench-cli-c4",
		"[1/2 c=4] restart: still: up with restart.id=bench-cli-c4 (it waits for the operator's restart); operator: restart",
		"[1/2 c=4] benchmark: Job " + disaggGraph + "-bench-c4, ARTIFACT_DIR=/model-cache/aiperf-artifacts/cli/c4",
		"[2/2 c=2] fetch: done",
		"| 2 | real | ok | 10 | 0 | 0.00 | 0.20 | 200.00 | 8.33 | 2000.00 | 2200.00 | 1000.00 |",
		"| 4 | real | ok |",
	} {
		assert.Contains(t, stdout.String(), want)
	}
	assert.FileExists(t, filepath.Join(results, "results.svg"))
	assert.FileExists(t, filepath.Join(results, "pulumi-up.log"))
	assertNothingLeft(t, world.kube, s.ns)

	// Ctrl-C while a point's Job runs.
	world.mu.Lock()
	world.hold = true
	world.mu.Unlock()
	interrupted := t.TempDir()
	cmd = exec.Command(bin, "-stack", "disagg", "-concurrency", "8", "-run", "cli2", "-out", interrupted, "-no-restart")
	cmd.Dir, cmd.Env = s.dir, env
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return slices.Contains(world.events(), "job c=8 restart=bench-cli-c2/Completed") }, time.Minute, 100*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	require.Error(t, err)
	assert.Contains(t, stderr.String(), "bench: interrupted after 0 of 1 points (the running Job and the helper pod are deleted; -resume -out "+interrupted+" continues)")
	assert.Contains(t, stdout.String(), "deleted job "+disaggGraph+"-bench-c8")
	assertNothingLeft(t, world.kube, s.ns)

	// Resumed from its directory alone (run ID and points from its sweep.json), then compared
	// with the first sweep.
	world.mu.Lock()
	world.hold = false
	world.mu.Unlock()
	cmd = exec.Command(bin, "-stack", "disagg", "-resume", "-out", interrupted, "-no-restart")
	cmd.Dir, cmd.Env = s.dir, env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "run cli2")
	assert.Contains(t, string(out), "| 8 | real | ok |")
	cmp := t.TempDir()
	cmd = exec.Command(bin, "-compare", results+","+interrupted, "-out", cmp)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	md, err := os.ReadFile(filepath.Join(cmp, "compare.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "| disagg cli (real) | 24 | 2 | real | ok |")
	assert.Contains(t, string(md), "| disagg cli2 (real) | 24 | 8 | real | ok |")
}

var dcdGVK = schema.GroupVersionKind{Group: "nvidia.com", Version: "v1beta1", Kind: "DynamoComponentDeployment"}

// playCluster plays, in ns, what no process on the plain API server does beside the real operator:
// the Job controller (download Jobs complete), the Deployment controller with ready pods, and the
// garbage collector. stop ends it.
func playCluster(t *testing.T, on client.Client, ns string) (stop func()) {
	return playEvery(func(ctx context.Context) {
		playJobController(ctx, t, on, ns, "complete")
		playDeployments(ctx, t, on, ns)
		playForegroundGC(ctx, t, on, ns)
	})
}

// playDeployments marks each Deployment ready: its replicas updated, ready and available at its
// current generation, with the Available condition, as the Deployment controller reports once the
// scheduler placed its pods and the kubelet found them ready.
func playDeployments(ctx context.Context, t *testing.T, on client.Client, ns string) {
	var list appsv1.DeploymentList
	if err := on.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range list.Items {
		d := &list.Items[i]
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		if d.DeletionTimestamp != nil || (s.ObservedGeneration == d.Generation && s.Replicas == want && s.AvailableReplicas == want && s.UpdatedReplicas == want) {
			continue
		}
		now := metav1.Now()
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: want, UpdatedReplicas: want, ReadyReplicas: want, AvailableReplicas: want,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", Message: "set by the test playing the Deployment controller", LastUpdateTime: now, LastTransitionTime: now},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", Message: "set by the test playing the Deployment controller", LastUpdateTime: now, LastTransitionTime: now},
			},
		}
		if err := on.Status().Update(ctx, d); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			t.Logf("playing the Deployment controller: %v", err)
		}
	}
}

// gcKinds are the kinds the played garbage collector follows: what the program creates and what
// the operator creates for a graph.
var gcKinds = []schema.GroupVersionKind{
	graphGVK, dcdGVK, computeDomainGVK,
	{Group: "nvidia.com", Version: "v1alpha1", Kind: "DynamoGraphDeploymentScalingAdapter"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "batch", Version: "v1", Kind: "Job"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "Secret"},
	{Version: "v1", Kind: "PersistentVolumeClaim"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"},
}

// playForegroundGC plays the garbage collector of kube-controller-manager in ns: an object
// deleted in the foreground has its dependents (by ownerReferences) deleted, and loses its
// foregroundDeletion finalizer once no dependent blocks it; an object whose owners are all gone
// is deleted. It never removes another finalizer.
func playForegroundGC(ctx context.Context, t *testing.T, on client.Client, ns string) {
	var objs []*unstructured.Unstructured
	for _, k := range gcKinds {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(k.GroupVersion().WithKind(k.Kind + "List"))
		if err := on.List(ctx, &list, client.InNamespace(ns)); err != nil {
			continue
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
	byUID := map[types.UID]*unstructured.Unstructured{}
	for _, o := range objs {
		byUID[o.GetUID()] = o
	}
	foreground := metav1.DeletePropagationForeground
	for _, o := range objs {
		refs := o.GetOwnerReferences()
		if o.GetDeletionTimestamp() == nil && len(refs) > 0 {
			// Only owners of the kinds followed here can be known to be gone.
			gone := true
			for _, r := range refs {
				_, present := byUID[r.UID]
				followed := slices.ContainsFunc(gcKinds, func(k schema.GroupVersionKind) bool { return k.Kind == r.Kind })
				if present || !followed {
					gone = false
				}
			}
			if gone {
				_ = on.Delete(ctx, o, &client.DeleteOptions{PropagationPolicy: &foreground})
			}
		}
		if o.GetDeletionTimestamp() == nil || !slices.Contains(o.GetFinalizers(), metav1.FinalizerDeleteDependents) {
			continue
		}
		blocked := false
		for _, d := range objs {
			for _, r := range d.GetOwnerReferences() {
				if r.UID != o.GetUID() {
					continue
				}
				if d.GetDeletionTimestamp() == nil {
					_ = on.Delete(ctx, d, &client.DeleteOptions{PropagationPolicy: &foreground})
				}
				if r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
					blocked = true
				}
			}
		}
		if blocked {
			continue
		}
		rest := slices.DeleteFunc(slices.Clone(o.GetFinalizers()), func(f string) bool { return f == metav1.FinalizerDeleteDependents })
		o.SetFinalizers(rest)
		if err := on.Update(ctx, o); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			t.Logf("playing the garbage collector: %v", err)
		}
	}
}
