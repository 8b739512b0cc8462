package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/tests/framework/rackbox"
)

// `make bench`'s command itself, as a user runs it from the project directory with the stack's
// backend in the environment, on an agg stack on a full rack (12 GPUs), its exec through the API
// server: a sweep restarting through the operator (-restart-by spec: restart.id and `up`, its
// output in pulumi-up.log), progress on the terminal and the table at the end; then a sweep with
// the recipe's restart (every pod of the graph deleted, the replacements Ready again) stopped by
// Ctrl-C while its point runs (the running Job and the helper pod deleted), resumed from its
// directory alone, and compared with the first.
func TestBoxBenchCommand(t *testing.T) {
	parallelOnBox(t)
	ns := "box-bench-cli"
	content := `{"timestamp":0,"input_length":1000,"output_length":10,"hash_ids":[1]}` + "\n"
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(content), 0o644))
	// The workers drain for their whole grace period (3 s here, 60 by default) when deleted, holding
	// their GPUs: the recipe's restart's replacements wait that long for room on the full rack.
	s := readyBoxStack(t, "agg", ns, rackbox.NVL72("bench-cli").WithGPUs(12), auto.ConfigMap{
		"minimax-m3:benchmark.enabled":                                              {Value: "true"},
		"minimax-m3:benchmark.traceSHA256":                                          {Value: sha256Hex(content)},
		"minimax-m3:worker.terminationGracePeriodSeconds":                           {Value: "3"},
		fmt.Sprintf("minimax-m3:worker.podAnnotations[%q]", rackbox.StopAnnotation): {Value: rackbox.StopAfterGrace},
	})
	played := newBoxBench(t, ns)

	bin := command(t, "./cmd/bench", "bench")
	env := os.Environ()
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = s.dir, env
		return cmd
	}
	results := t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := run("-stack", "agg", "-concurrency", "4,2", "-trace", trace, "-run", "cli", "-out", results, "-heartbeat", "1s", "-restart-by", "spec")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stdout.String()+stderr.String())
	for _, want := range []string{
		"benchmark sweep of agg (graph " + ns + "/" + aggGraph + ", 12 GPUs, speculative decoding real): concurrency 4,2, run cli",
		"[sweep] stage: trace /model-cache/traces/",
		"[1/2 c=4] restart: spec.restart.id=bench-cli-c4",
		"[1/2 c=4] restart: still: up with restart.id=bench-cli-c4 (it waits for the operator's restart); operator: restart",
		"[1/2 c=4] benchmark: Job " + aggGraph + "-bench-c4, ARTIFACT_DIR=/model-cache/aiperf-artifacts/cli/c4",
		"[2/2 c=2] fetch: done",
		"| 2 | real | ok | 3 | 0 |",
		"| 4 | real | ok |",
	} {
		assert.Contains(t, stdout.String(), want)
	}
	assert.FileExists(t, filepath.Join(results, "results.svg"))
	upLog, err := os.ReadFile(filepath.Join(results, "pulumi-up.log"))
	require.NoError(t, err)
	assert.Contains(t, string(upLog), "=== pulumi up with restart.id=bench-cli-c2, restart.strategy=Parallel")
	boxBenchLeftovers(t, played.kube, ns, aggGraph)

	// The recipe's restart, then Ctrl-C while the point's AIPerf pod runs.
	interrupted := t.TempDir()
	stdout.Reset()
	stderr.Reset()
	cmd = run("-stack", "agg", "-concurrency", "8", "-run", "cli2", "-out", interrupted, "-heartbeat", "1s")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done, started := make(chan struct{}), make(chan *os.Process, 1)
	played.onRun(func(run string, _ int) {
		if run != "cli2" {
			return
		}
		// The point's pod stays running until the command has ended.
		played.onRun(nil)
		if (<-started).Signal(os.Interrupt) == nil {
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
			}
		}
	})
	require.NoError(t, cmd.Start())
	started <- cmd.Process
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("bench did not end after Ctrl-C:\n%s%s", stdout.String(), stderr.String())
	}
	require.Error(t, waitErr)
	assert.Contains(t, stdout.String(), "[1/1 c=8] restart: deleting every pod of graph "+aggGraph)
	// While the old workers drain, their replacements cannot be placed: that is the restart's own
	// wait, not a problem to report.
	assert.Regexp(t, `\[1/1 c=8\] restart: still: [^\n]*graph pods: \d+ Ready, \d+ starting, [1-9]\d* terminating`, stdout.String(), "the old workers were seen draining")
	assert.NotContains(t, stdout.String(), "cannot be scheduled", "no line for the replacements waiting on the draining workers' GPUs")
	assert.Contains(t, stderr.String(), "bench: interrupted after 0 of 1 points (the running Job and the helper pod are deleted; -resume -out "+interrupted+" continues)")
	assert.Contains(t, stdout.String(), "deleted job "+aggGraph+"-bench-c8")
	boxBenchLeftovers(t, played.kube, ns, aggGraph)

	// Resumed from its directory alone (run ID and points from its sweep.json), then compared
	// with the first sweep.
	out, err := run("-stack", "agg", "-resume", "-out", interrupted).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "run cli2")
	assert.Contains(t, string(out), "| 8 | real | ok |")
	cmp := t.TempDir()
	out, err = run("-compare", results+","+interrupted, "-out", cmp).CombinedOutput()
	require.NoError(t, err, string(out))
	md, err := os.ReadFile(filepath.Join(cmp, "compare.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "| agg cli (real) | 12 | 2 | real | ok |")
	assert.Contains(t, string(md), "| agg cli2 (real) | 12 | 8 | real | ok |")
}
