package benchmark

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"minimax-m3/components"
	"minimax-m3/config"
	"minimax-m3/internal/objwatch"
)

// Executor runs a command in a container and streams its stdin and stdout, as `kubectl exec` does.
type Executor interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string, stdin io.Reader, stdout io.Writer) error
}

// Restarter restarts the graph's pods through its spec.restart with a new ID, and returns once the
// change is applied (cmd/bench: `restart.id` in the stack's config, then `up`).
type Restarter func(ctx context.Context, id string) error

// Phase is what a sweep is doing.
type Phase string

// The phases of a sweep, in order.
const (
	PhaseHelper     Phase = "helper"
	PhaseStage      Phase = "stage"
	PhaseWriteCheck Phase = "write-check"
	PhaseRestart    Phase = "restart"
	PhaseBenchmark  Phase = "benchmark"
	PhaseFetch      Phase = "fetch"
	PhaseResults    Phase = "results"
	PhaseCleanup    Phase = "cleanup"
)

// Event is a sweep's progress: which point (1-based, 0 before the first), which phase, what it
// waits for, and for how long so far.
type Event struct {
	Point, Points int
	Concurrency   int
	Phase         Phase
	Message       string
	Elapsed       time.Duration
	// Done marks a phase's last event.
	Done bool
}

func (e Event) String() string {
	where := "sweep"
	if e.Point > 0 {
		where = fmt.Sprintf("%d/%d c=%d", e.Point, e.Points, e.Concurrency)
	}
	s := fmt.Sprintf("[%s] %s: %s", where, e.Phase, e.Message)
	if e.Elapsed > 0 {
		s += fmt.Sprintf(" (%s)", e.Elapsed.Round(time.Second))
	}
	return s
}

// Sweep is one benchmark sweep of a deployed stack: for each concurrency point, a restart of the
// graph's pods (the recipe's: every pod deleted at once; or through spec.restart), one AIPerf Job with its own artifact directory, and the
// artifacts copied out, then the merged table and plot.
type Sweep struct {
	// Config is the stack's config (its benchmark.* and the graph's names), Namespace where it runs.
	Config    *config.Config
	Namespace string
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
	Exec      Executor
	Restart   Restarter
	// Concurrency lists the points, run in this order.
	Concurrency []int
	// RunID names the run: restart IDs bench-<RunID>-c<N>, artifact directories
	// <benchmark.artifactDirectory>/<RunID>/c<N> on the claim.
	RunID string
	// OutDir receives c<N>/ (each point's artifacts), results.csv, results.md, results.svg and
	// sweep.json.
	OutDir string
	// StageTrace, when set, is a local trace file copied onto the claim at benchmark.traceFile
	// first, after its SHA-256 matched benchmark.traceSHA256.
	StageTrace string
	// NoRestart skips the restarts (points then share server state; sweep.json says so).
	NoRestart bool
	// RestartBy is how the graph restarts between points: RestartPods (the default) or RestartSpec.
	RestartBy string
	Progress  func(Event)
	// Heartbeat is how often a long wait reports progress (default 30s).
	Heartbeat time.Duration
}

// Result is what a sweep produced.
type Result struct {
	Points []Point
	// Files are the merged table, plot and metadata written to OutDir.
	Files []string
}

// Metadata is sweep.json: what ran, so a result is never read without its conditions.
type Metadata struct {
	Graph                     string    `json:"graph"`
	Namespace                 string    `json:"namespace"`
	RunID                     string    `json:"runID"`
	Concurrency               []int     `json:"concurrency"`
	GPUs                      int       `json:"gpus"`
	SpeculativeMode           string    `json:"speculativeMode"`
	SyntheticAcceptanceLength float64   `json:"syntheticAcceptanceLength,omitempty"`
	NumSpeculativeTokens      int       `json:"numSpeculativeTokens"`
	Image                     string    `json:"image"`
	TraceFile                 string    `json:"traceFile"`
	TraceSHA256               string    `json:"traceSHA256,omitempty"`
	RestartedBetweenPoints    bool      `json:"restartedBetweenPoints"`
	RestartedBy               string    `json:"restartedBy,omitempty"`
	Started                   time.Time `json:"started"`
	Finished                  time.Time `json:"finished"`
}

const helperContainer = "helper"

// JobName is the benchmark Job of one point.
func JobName(graph string, concurrency int) string {
	return fmt.Sprintf("%s-bench-c%d", graph, concurrency)
}

// RestartID is the spec.restart ID a point's restart sets.
func RestartID(runID string, concurrency int) string {
	return fmt.Sprintf("bench-%s-c%d", runID, concurrency)
}

// ArtifactDir is a point's directory on the claim, as the Job sees it.
func ArtifactDir(c *config.Config, runID string, concurrency int) string {
	return path.Join(config.BenchmarkMountPath, c.Benchmark.ArtifactDirectory, runID, fmt.Sprintf("c%d", concurrency))
}

func (s *Sweep) validate() error {
	var problems []string
	if !s.Config.Benchmark.Enabled {
		problems = append(problems, "benchmark.enabled is false in the stack's config: set it and run `pulumi up` first (the stack then creates the AIPerf ConfigMap)")
	}
	if len(s.Concurrency) == 0 {
		problems = append(problems, "no concurrency points")
	}
	seen := map[int]bool{}
	for _, c := range s.Concurrency {
		if c < 1 {
			problems = append(problems, fmt.Sprintf("concurrency %d: must be at least 1", c))
		}
		if seen[c] {
			problems = append(problems, fmt.Sprintf("concurrency %d appears twice: each point needs its own directory", c))
		}
		seen[c] = true
	}
	if s.RunID == "" || strings.ContainsAny(s.RunID, "/= ") {
		problems = append(problems, fmt.Sprintf("run ID %q: must be non-empty, without '/', '=' or spaces", s.RunID))
	}
	if s.OutDir == "" {
		problems = append(problems, "no output directory")
	}
	if s.RestartBy != "" && s.RestartBy != RestartPods && s.RestartBy != RestartSpec {
		problems = append(problems, fmt.Sprintf("restart by %q: must be %s or %s", s.RestartBy, RestartPods, RestartSpec))
	}
	if s.RestartBy == RestartSpec && s.Restart == nil && !s.NoRestart {
		problems = append(problems, "restart by spec needs a Restarter")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Run runs the sweep. Cancelling ctx (an interrupt) deletes the running Job and the helper pod.
func (s *Sweep) Run(ctx context.Context) (Result, error) {
	if err := s.validate(); err != nil {
		return Result{}, err
	}
	if s.Heartbeat == 0 {
		s.Heartbeat = 30 * time.Second
	}
	if s.RestartBy == "" {
		s.RestartBy = RestartPods
	}
	if err := os.MkdirAll(s.OutDir, 0o755); err != nil {
		return Result{}, err
	}
	meta := Metadata{
		Graph: s.Config.GraphName, Namespace: s.Namespace, RunID: s.RunID, Concurrency: s.Concurrency,
		GPUs: s.Config.GPUs(), SpeculativeMode: string(s.Config.Speculative.Mode),
		NumSpeculativeTokens: s.Config.Speculative.NumSpeculativeTokens,
		Image:                s.Config.Benchmark.Image, TraceFile: s.Config.Benchmark.TraceFile, TraceSHA256: s.Config.Benchmark.TraceSHA256,
		RestartedBetweenPoints: !s.NoRestart, Started: time.Now().UTC(),
	}
	if !s.NoRestart {
		meta.RestartedBy = s.RestartBy
	}
	if s.Config.Speculative.Mode == config.SpeculativeSynthetic {
		meta.SyntheticAcceptanceLength = s.Config.Speculative.SyntheticAcceptanceLength
	}

	helper := s.Config.GraphName + "-bench-helper"
	defer s.cleanup(PhaseCleanup, 0, 0, "pod", helper)
	if err := s.startHelper(ctx, helper); err != nil {
		return Result{}, err
	}
	if err := s.stageTrace(ctx, helper); err != nil {
		return Result{}, err
	}
	if err := s.writeCheck(ctx); err != nil {
		return Result{}, err
	}

	var points []Point
	for i, c := range s.Concurrency {
		p, err := s.point(ctx, helper, i+1, c)
		if err != nil {
			return Result{Points: points}, err
		}
		points = append(points, p)
	}
	meta.Finished = time.Now().UTC()
	files, err := s.writeResults(points, meta)
	return Result{Points: points, Files: files}, err
}

func (s *Sweep) emit(e Event) {
	if s.Progress != nil {
		s.Progress(e)
	}
}

// step reports a phase's start and end around f, and its heartbeat while f waits.
//
// describe, when set, says at each heartbeat what the cluster reports meanwhile.
func (s *Sweep) step(ctx context.Context, point, concurrency int, phase Phase, msg string, describe func(context.Context) string, f func(ctx context.Context, beat func(string)) error) error {
	start := time.Now()
	ev := func(m string, done bool) Event {
		return Event{Point: point, Points: len(s.Concurrency), Concurrency: concurrency, Phase: phase, Message: m, Elapsed: time.Since(start), Done: done}
	}
	s.emit(Event{Point: point, Points: len(s.Concurrency), Concurrency: concurrency, Phase: phase, Message: msg})
	last := msg
	beats := make(chan string, 16)
	errc := make(chan error, 1)
	go func() { errc <- f(ctx, func(m string) { beats <- m }) }()
	tick := time.NewTicker(s.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case m := <-beats:
			last = m
			s.emit(ev(m, false))
		case <-tick.C:
			m := "still: " + last
			if describe != nil {
				if d := describe(ctx); d != "" {
					m += "; " + d
				}
			}
			s.emit(ev(m, false))
		case err := <-errc:
			for len(beats) > 0 {
				s.emit(ev(<-beats, false))
			}
			if err != nil {
				return fmt.Errorf("%s: %w", phase, err)
			}
			s.emit(ev("done", true))
			return nil
		}
	}
}

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
		pod := components.BenchmarkHelperPod(s.Config, s.Namespace, name)
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

// stageTrace copies the trace onto the claim when asked, and checks the staged trace's SHA-256.
func (s *Sweep) stageTrace(ctx context.Context, helper string) error {
	b := s.Config.Benchmark
	remote := path.Join(config.BenchmarkMountPath, b.TraceFile)
	return s.step(ctx, 0, 0, PhaseStage, "trace "+remote, nil, func(ctx context.Context, beat func(string)) error {
		if s.StageTrace != "" {
			sum, size, err := fileSHA256(s.StageTrace)
			if err != nil {
				return err
			}
			if b.TraceSHA256 != "" && sum != b.TraceSHA256 {
				return fmt.Errorf("%s has SHA-256 %s, but benchmark.traceSHA256 is %s: not staging it", s.StageTrace, sum, b.TraceSHA256)
			}
			f, err := os.Open(s.StageTrace)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			beat(fmt.Sprintf("copying %s (%d bytes, SHA-256 %s)", s.StageTrace, size, sum))
			// Written beside the target and renamed only once its checksum matches: a broken copy
			// never replaces a good trace.
			const script = `set -e; mkdir -p "$(dirname "$1")"; cat > "$1.partial"
got=$(sha256sum "$1.partial" | cut -d' ' -f1)
if [ "$got" != "$2" ]; then rm -f "$1.partial"; echo "copied trace has SHA-256 $got, expected $2" >&2; exit 1; fi
mv "$1.partial" "$1"`
			if err := s.exec(ctx, helper, []string{"sh", "-c", script, "sh", remote, sum}, f, io.Discard); err != nil {
				return fmt.Errorf("copying the trace: %w", err)
			}
			return nil
		}
		beat("checking the staged trace")
		var out bytes.Buffer
		if err := s.exec(ctx, helper, []string{"sh", "-c", `test -s "$1" || { echo "no trace at $1: stage it with -trace <local file>" >&2; exit 1; }; sha256sum "$1"`, "sh", remote}, nil, &out); err != nil {
			return err
		}
		got, _, _ := strings.Cut(strings.TrimSpace(out.String()), " ")
		if b.TraceSHA256 != "" && got != b.TraceSHA256 {
			return fmt.Errorf("the trace on the claim (%s) has SHA-256 %s, but benchmark.traceSHA256 is %s: stage the right one with -trace <local file>", remote, got, b.TraceSHA256)
		}
		return nil
	})
}

func fileSHA256(name string) (string, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// writeCheck runs the recipe's artifact write check for this run's directory.
func (s *Sweep) writeCheck(ctx context.Context) error {
	dir := path.Join(config.BenchmarkMountPath, s.Config.Benchmark.ArtifactDirectory, s.RunID)
	name := s.Config.GraphName + "-bench-write-check"
	return s.step(ctx, 0, 0, PhaseWriteCheck, "can the AIPerf Job's user write "+dir+"?", s.describeJob(name), func(ctx context.Context, beat func(string)) error {
		job := components.AIPerfWriteCheckJob(s.Config, s.Namespace, name, dir)
		defer s.cleanup(PhaseWriteCheck, 0, 0, "job", name)
		return s.runJob(ctx, &job, beat)
	})
}

// point runs one concurrency point.
func (s *Sweep) point(ctx context.Context, helper string, i, c int) (Point, error) {
	if !s.NoRestart && s.RestartBy != RestartSpec {
		err := s.step(ctx, i, c, PhaseRestart, "deleting every pod of graph "+s.Config.GraphName, s.describePods, s.RestartPods)
		if err != nil {
			return Point{}, err
		}
	}
	if !s.NoRestart && s.RestartBy == RestartSpec {
		id := RestartID(s.RunID, c)
		err := s.step(ctx, i, c, PhaseRestart, "spec.restart.id="+id, s.describeGraph, func(ctx context.Context, beat func(string)) error {
			beat("up with restart.id=" + id + " (it waits for the operator's restart)")
			if err := s.Restart(ctx, id); err != nil {
				return err
			}
			beat("waiting for the operator to complete the restart and report the graph Ready")
			return s.waitRestarted(ctx, id)
		})
		if err != nil {
			return Point{}, err
		}
	}

	dir := ArtifactDir(s.Config, s.RunID, c)
	name := JobName(s.Config.GraphName, c)
	err := s.step(ctx, i, c, PhaseBenchmark, fmt.Sprintf("Job %s, ARTIFACT_DIR=%s", name, dir), s.describeJob(name), func(ctx context.Context, beat func(string)) error {
		job := components.AIPerfJob(s.Config, s.Namespace, components.BenchmarkPoint{Name: name, ArtifactDir: dir, Concurrency: c})
		defer s.cleanup(PhaseBenchmark, i, c, "job", name)
		return s.runJob(ctx, &job, beat)
	})
	if err != nil {
		return Point{}, err
	}

	local := filepath.Join(s.OutDir, fmt.Sprintf("c%d", c))
	var p Point
	err = s.step(ctx, i, c, PhaseFetch, dir+" to "+local, nil, func(ctx context.Context, beat func(string)) error {
		if err := s.fetch(ctx, helper, dir, local); err != nil {
			return err
		}
		summary, err := findFile(local, SummaryFile)
		if err != nil {
			return err
		}
		p, err = ReadSummary(summary, c, string(s.Config.Speculative.Mode))
		if err != nil {
			return err
		}
		beat(fmt.Sprintf("%.1f output tokens/s, %.1f per user, TTFT p50 %.0f ms", p.OutputTokensPerSecond, p.PerUserTokensPerSecond, p.TTFTp50))
		return nil
	})
	return p, err
}

// fetch copies a directory of the claim into a local one, as `kubectl cp` does (tar over exec).
func (s *Sweep) fetch(ctx context.Context, helper, dir, local string) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := s.exec(ctx, helper, []string{"tar", "cf", "-", "-C", dir, "."}, nil, pw)
		_ = pw.CloseWithError(err)
		errc <- err
	}()
	untarErr := untar(pr, local)
	if untarErr == nil {
		// tar pads its stream beyond the end-of-archive marker the reader stops at.
		_, untarErr = io.Copy(io.Discard, pr)
	}
	_ = pr.CloseWithError(untarErr)
	if err := <-errc; err != nil {
		return fmt.Errorf("reading %s on the claim: %w", dir, err)
	}
	return untarErr
}

// untar writes a tar stream's regular files and directories under dir, refusing any path that
// would leave it.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

func findFile(dir, name string) (string, error) {
	var found string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == name && found == "" {
			found = p
		}
		return nil
	})
	if err == nil && found == "" {
		err = fmt.Errorf("no %s in the artifacts copied to %s", name, dir)
	}
	return found, err
}

func (s *Sweep) exec(ctx context.Context, pod string, command []string, stdin io.Reader, stdout io.Writer) error {
	return s.Exec.Exec(ctx, s.Namespace, pod, helperContainer, command, stdin, stdout)
}

// runJob creates a Job (replacing one of the sweep's own left by an interrupted run) and waits
// until it completes or fails.
func (s *Sweep) runJob(ctx context.Context, job *batchv1.Job, beat func(string)) error {
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
	g, err := s.Dynamic.Resource(components.GraphResource).Namespace(s.Namespace).Get(ctx, s.Config.GraphName, metav1.GetOptions{})
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
	graphs := s.Dynamic.Resource(components.GraphResource).Namespace(s.Namespace)
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
	return ReadyAtGeneration(g), nil
}

// ReadyAtGeneration says whether the operator reports the graph Ready at its generation (the
// condition's observedGeneration, else status.observedGeneration).
func ReadyAtGeneration(g *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(g.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Ready" || m["status"] != "True" {
			continue
		}
		gen, ok := m["observedGeneration"].(int64)
		if !ok {
			gen, _, _ = unstructured.NestedInt64(g.Object, "status", "observedGeneration")
		}
		return gen >= g.GetGeneration()
	}
	return false
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

// writeResults writes the merged table, the plot and sweep.json.
func (s *Sweep) writeResults(points []Point, meta Metadata) ([]string, error) {
	var files []string
	gpus := s.Config.GPUs()
	write := func(name string, f func(io.Writer) error) error {
		p := filepath.Join(s.OutDir, name)
		var buf bytes.Buffer
		if err := f(&buf); err != nil {
			return err
		}
		files = append(files, p)
		return os.WriteFile(p, buf.Bytes(), 0o644)
	}
	title := fmt.Sprintf("%s, %d GPUs, speculative decoding %s", s.Config.GraphName, gpus, meta.SpeculativeMode)
	if meta.SyntheticAcceptanceLength > 0 {
		title += fmt.Sprintf(" (acceptance length %g)", meta.SyntheticAcceptanceLength)
	}
	for _, w := range []struct {
		name string
		f    func(io.Writer) error
	}{
		{"results.csv", func(w io.Writer) error { return WriteCSV(w, points, gpus) }},
		{"results.md", func(w io.Writer) error { return WriteMarkdown(w, points, gpus) }},
		{"results.svg", func(w io.Writer) error { return WriteSVG(w, points, gpus, title) }},
		{"sweep.json", func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(meta)
		}},
	} {
		if err := write(w.name, w.f); err != nil {
			return files, err
		}
	}
	s.emit(Event{Phase: PhaseResults, Message: "wrote " + strings.Join(files, ", "), Done: true})
	return files, nil
}
