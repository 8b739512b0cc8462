package benchmark

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"minimax-m3/config"
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
	PhaseLease      Phase = "lease"
	PhaseHelper     Phase = "helper"
	PhaseStage      Phase = "stage"
	PhaseWriteCheck Phase = "write-check"
	PhaseRestart    Phase = "restart"
	PhaseBenchmark  Phase = "benchmark"
	PhaseFetch      Phase = "fetch"
	PhaseResults    Phase = "results"
	PhasePrune      Phase = "prune"
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
	// ErrorBudget is the share of a point's requests (0 to 1) that may fail before the point fails
	// and the sweep stops; a point AIPerf cancelled always fails.
	ErrorBudget float64
	// Resume continues the sweep whose sweep.json is in OutDir: the same run ID and conditions;
	// points it fetched and passed are kept, the others run.
	Resume bool
	// PruneClaim deletes the run's artifact directory on the claim once the sweep has completed
	// and every point's artifacts are in OutDir.
	PruneClaim bool
	// Stack and ProgramCommit identify what deployed the graph, for sweep.json.
	Stack, ProgramCommit string
	Progress             func(Event)
	// Heartbeat is how often a long wait reports progress (default 30s).
	Heartbeat time.Duration
}

// Result is what a sweep produced.
type Result struct {
	Points []Point
	// Files are the merged table, plot and metadata written to OutDir.
	Files []string
}

// Metadata is sweep.json: what ran and what it measured, so a result is never read without its
// conditions. It is written after every point.
type Metadata struct {
	Stack         string `json:"stack,omitempty"`
	ProgramCommit string `json:"programCommit,omitempty"`
	Graph         string `json:"graph"`
	Namespace     string `json:"namespace"`
	RunID         string `json:"runID"`
	Concurrency   []int  `json:"concurrency"`
	GPUs          int    `json:"gpus"`
	// Components are the graph's images as its pods ran them when the sweep started.
	Components                []ComponentImage   `json:"components"`
	SpeculativeMode           string             `json:"speculativeMode"`
	SyntheticAcceptanceLength float64            `json:"syntheticAcceptanceLength,omitempty"`
	NumSpeculativeTokens      int                `json:"numSpeculativeTokens"`
	AIPerfImage               string             `json:"aiperfImage"`
	AIPerfImageID             string             `json:"aiperfImageID,omitempty"`
	AIPerfVersion             string             `json:"aiperfVersion,omitempty"`
	TraceFile                 string             `json:"traceFile"`
	TraceSHA256               string             `json:"traceSHA256,omitempty"`
	TraceRequests             int                `json:"traceRequests,omitempty"`
	ErrorBudget               float64            `json:"errorBudget"`
	Goodput                   map[string]float64 `json:"goodputSLOs,omitempty"`
	RestartedBetweenPoints    bool               `json:"restartedBetweenPoints"`
	RestartedBy               string             `json:"restartedBy,omitempty"`
	Started                   time.Time          `json:"started"`
	Resumed                   []time.Time        `json:"resumed,omitempty"`
	Finished                  time.Time          `json:"finished,omitzero"`
	// Complete: every point ran and passed.
	Complete bool    `json:"complete"`
	Points   []Point `json:"points"`
}

// Series is the sweep's points as a table or plot shows them.
func (m Metadata) Series() Series {
	return Series{Label: fmt.Sprintf("%s %s (%s)", m.Stack, m.RunID, m.SpeculativeMode), GPUs: m.GPUs, Points: m.Points}
}

const helperContainer = "helper"

// runIDPattern is a run ID: a label value short enough for bench-<run>-c<N> to stay one.
var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,38}[A-Za-z0-9])?$`)

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
	if !runIDPattern.MatchString(s.RunID) {
		problems = append(problems, fmt.Sprintf("run ID %q: 1 to 40 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (it labels the run's objects and names its directories)", s.RunID))
	}
	if s.ErrorBudget < 0 || s.ErrorBudget > 1 {
		problems = append(problems, fmt.Sprintf("error budget %g: a share of the requests, from 0 to 1", s.ErrorBudget))
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

// Run runs the sweep. Cancelling ctx (an interrupt) deletes the running Job and the helper pod;
// the points fetched so far stay in OutDir, and Resume continues from there.
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
	meta := s.metadata()
	earlier, err := s.earlierRun(meta)
	if err != nil {
		return Result{}, err
	}
	done := map[int]Point{}
	if earlier != nil {
		meta.Started, meta.Resumed = earlier.Started, append(earlier.Resumed, time.Now().UTC())
		for _, p := range earlier.Points {
			if p.Failure == "" && s.fetched(p.Concurrency) {
				done[p.Concurrency] = p
			}
		}
	}

	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	lease, err := acquireLease(ctx, s.Kube, s.Namespace, s.RunID, s.Config.GraphName, func(err error) { stop(err) })
	if err != nil {
		return Result{}, err
	}
	defer lease.release()
	s.emit(Event{Phase: PhaseLease, Message: fmt.Sprintf("holding Lease %s/%s as run %s", s.Namespace, LeaseName, s.RunID), Done: true})

	if meta.Components, err = s.graphImages(ctx); err != nil {
		return Result{}, err
	}
	if earlier != nil {
		if err := checkImages(earlier.Components, meta.Components); err != nil {
			return Result{}, err
		}
		meta.AIPerfImageID, meta.AIPerfVersion = earlier.AIPerfImageID, earlier.AIPerfVersion
	}
	helper := s.Config.GraphName + "-bench-helper"
	defer s.cleanup(PhaseCleanup, 0, 0, "pod", helper)
	if err := s.startHelper(ctx, helper); err != nil {
		return Result{}, causeOf(ctx, err)
	}
	if meta.TraceRequests, err = s.stageTrace(ctx, helper); err != nil {
		return Result{}, causeOf(ctx, err)
	}
	if err := s.writeCheck(ctx); err != nil {
		return Result{}, causeOf(ctx, err)
	}

	// sweep.json from the start: a sweep interrupted at any point can be resumed.
	for _, c := range s.Concurrency {
		if p, ok := done[c]; ok {
			meta.Points = append(meta.Points, p)
		}
	}
	files, err := s.writeResults(meta)
	if err != nil {
		return Result{}, err
	}
	for i, c := range s.Concurrency {
		if _, ok := done[c]; ok {
			s.emit(Event{Point: i + 1, Points: len(s.Concurrency), Concurrency: c, Phase: PhaseBenchmark, Done: true,
				Message: "kept from the interrupted run: its artifacts are in " + filepath.Join(s.OutDir, fmt.Sprintf("c%d", c))})
			continue
		}
		p, err := s.point(ctx, helper, i+1, c, meta.TraceRequests, &meta)
		if err != nil {
			return Result{Points: meta.Points, Files: files}, causeOf(ctx, err)
		}
		meta.Points = append(meta.Points, p)
		if files, err = s.writeResults(meta); err != nil {
			return Result{Points: meta.Points, Files: files}, err
		}
		if p.Failure != "" {
			return Result{Points: meta.Points, Files: files}, fmt.Errorf("point c=%d failed: %s (the results so far are in %s; -resume runs it again)", c, p.Failure, s.OutDir)
		}
	}
	meta.Finished, meta.Complete = time.Now().UTC(), true
	if files, err = s.writeResults(meta); err != nil {
		return Result{Points: meta.Points, Files: files}, err
	}
	if s.PruneClaim {
		if err := s.prune(ctx, helper); err != nil {
			return Result{Points: meta.Points, Files: files}, err
		}
	}
	return Result{Points: meta.Points, Files: files}, nil
}

// causeOf is err, or why ctx was cancelled when the sweep cancelled it (a lost Lease).
func causeOf(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%w (stopped: %w)", err, cause)
	}
	return err
}

// metadata is sweep.json's conditions for this sweep, before anything ran.
func (s *Sweep) metadata() Metadata {
	b := s.Config.Benchmark
	meta := Metadata{
		Stack: s.Stack, ProgramCommit: s.ProgramCommit,
		Graph: s.Config.GraphName, Namespace: s.Namespace, RunID: s.RunID, Concurrency: s.Concurrency,
		GPUs: s.Config.GPUs(), SpeculativeMode: string(s.Config.Speculative.Mode),
		NumSpeculativeTokens: s.Config.Speculative.NumSpeculativeTokens,
		AIPerfImage:          b.Image, TraceFile: b.TraceFile, TraceSHA256: b.TraceSHA256,
		ErrorBudget: s.ErrorBudget, Goodput: b.Goodput.AIPerf(),
		RestartedBetweenPoints: !s.NoRestart, Started: time.Now().UTC(),
	}
	if len(meta.Goodput) == 0 {
		meta.Goodput = nil
	}
	if !s.NoRestart {
		meta.RestartedBy = s.RestartBy
	}
	if s.Config.Speculative.Mode == config.SpeculativeSynthetic {
		meta.SyntheticAcceptanceLength = s.Config.Speculative.SyntheticAcceptanceLength
	}
	return meta
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

// point runs one concurrency point.
func (s *Sweep) point(ctx context.Context, helper string, i, c, requests int, meta *Metadata) (Point, error) {
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
	started := time.Now()
	err := s.step(ctx, i, c, PhaseBenchmark, fmt.Sprintf("Job %s, ARTIFACT_DIR=%s", name, dir), s.describeBenchmark(helper, name, dir, requests, started), func(ctx context.Context, beat func(string)) error {
		// A point run again (resumed) starts from an empty directory: AIPerf's files of the
		// earlier attempt must not be read as this one's.
		if err := s.exec(ctx, helper, []string{"rm", "-rf", dir}, nil, io.Discard); err != nil {
			return fmt.Errorf("emptying %s: %w", dir, err)
		}
		job := AIPerfJob(s.Config, s.Namespace, JobPoint{Name: name, ArtifactDir: dir, Concurrency: c})
		job.Labels[RunLabel] = s.RunID
		job.Spec.Template.Labels = map[string]string{RunLabel: s.RunID}
		defer s.cleanup(PhaseBenchmark, i, c, "job", name)
		return s.runJob(ctx, &job, beat, func(pod string) {
			if meta.AIPerfImageID == "" {
				meta.AIPerfImageID = s.containerImageID(ctx, pod, "aiperf")
			}
		})
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
		p.Judge(s.ErrorBudget)
		if p.AIPerfVersion != "" {
			meta.AIPerfVersion = p.AIPerfVersion
		}
		msg := fmt.Sprintf("%d requests, %d failed; %.1f output tokens/s, %.1f per user, TTFT p50 %.0f ms", p.Requests, p.Errors, p.OutputTokensPerSecond, p.PerUserTokensPerSecond, p.TTFTp50)
		if p.Failure != "" {
			msg += "; FAILED: " + p.Failure
		}
		beat(msg)
		return nil
	})
	return p, err
}

// writeResults writes the merged table, the plot and sweep.json of the points so far, each file
// replaced whole (written beside it, then renamed): an interrupted sweep leaves the last complete
// set.
func (s *Sweep) writeResults(meta Metadata) ([]string, error) {
	var files []string
	series := meta.Series()
	series.Label = ""
	title := fmt.Sprintf("%s, %d GPUs, speculative decoding %s", s.Config.GraphName, meta.GPUs, meta.SpeculativeMode)
	if meta.SyntheticAcceptanceLength > 0 {
		title += fmt.Sprintf(" (acceptance length %g)", meta.SyntheticAcceptanceLength)
	}
	for _, w := range []struct {
		name string
		f    func(io.Writer) error
	}{
		{"results.csv", func(w io.Writer) error { return WriteCSV(w, series) }},
		{"results.md", func(w io.Writer) error { return WriteMarkdown(w, series) }},
		{"results.svg", func(w io.Writer) error { return WriteSVG(w, title, series) }},
		{MetadataFile, func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(meta)
		}},
	} {
		p := filepath.Join(s.OutDir, w.name)
		var buf bytes.Buffer
		if err := w.f(&buf); err != nil {
			return files, err
		}
		if err := writeFileAtomic(p, buf.Bytes()); err != nil {
			return files, err
		}
		files = append(files, p)
	}
	s.emit(Event{Phase: PhaseResults, Message: fmt.Sprintf("%d of %d points in %s", len(meta.Points), len(s.Concurrency), strings.Join(files, ", ")), Done: true})
	return files, nil
}

// writeFileAtomic replaces name with data through a temporary file in its directory.
func writeFileAtomic(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
