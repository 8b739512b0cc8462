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
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"minimax-m3/components"
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
