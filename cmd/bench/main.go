package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"minimax-m3/automation"
	"minimax-m3/benchmark"
	"minimax-m3/config"
	"minimax-m3/internal/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		stack, points, out, trace, runID, projectDir, kubeconfig, restartBy, compare string
		noRestart, resume, pruneClaim                                                bool
		heartbeat                                                                    time.Duration
		errorBudget                                                                  float64
	)
	flag.StringVar(&stack, "stack", "", "the deployed stack to benchmark (its config must set benchmark.enabled)")
	flag.StringVar(&points, "concurrency", "", "concurrency points, run in this order (16,32,64)")
	flag.StringVar(&out, "out", "", "local directory for the artifacts and results (default bench-results/<stack>-<run>)")
	flag.StringVar(&trace, "trace", "", "stage this local trace file onto the claim first (its SHA-256 must match benchmark.traceSHA256)")
	flag.StringVar(&runID, "run", "", "run ID (default: the time, or with -resume the interrupted run's): its Lease and labels, restart IDs bench-<run>-c<N>, artifact directories <benchmark.artifactDirectory>/<run>/c<N>")
	flag.StringVar(&projectDir, "project-dir", ".", "the directory holding Pulumi.yaml and the stack files")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: KUBECONFIG, then ~/.kube/config); the stack's kubernetes.context selects the context")
	flag.BoolVar(&noRestart, "no-restart", false, "do not restart the graph's pods between points (sweep.json records it)")
	flag.StringVar(&restartBy, "restart-by", benchmark.RestartPods, "how the graph restarts between points: pods (the recipe's: delete every pod of the graph at once, wait for the replacements to be Ready) or spec (restart.id with restart.strategy Parallel, then up: the operator rolls each component within its rollout's bounds)")
	flag.DurationVar(&heartbeat, "heartbeat", 30*time.Second, "how often a long wait reports progress")
	flag.Float64Var(&errorBudget, "error-budget", 0.01, "the share of a point's requests (0 to 1) that may fail; a point over it, or cancelled, fails and stops the sweep")
	flag.BoolVar(&resume, "resume", false, "continue the sweep whose results are in -out: points already fetched are kept, the rest run (same stack, run and conditions)")
	flag.BoolVar(&pruneClaim, "prune-claim", false, "once every point's artifacts are copied out, delete the run's artifact directory on the claim")
	flag.StringVar(&compare, "compare", "", "compare finished sweeps: their output directories, comma-separated; writes compare.csv, compare.md and compare.svg into -out")
	flag.Parse()
	if compare != "" {
		if out == "" {
			return errors.New("-compare needs -out")
		}
		files, err := benchmark.Compare(strings.Split(compare, ","), out)
		if err != nil {
			return err
		}
		fmt.Println("wrote", strings.Join(files, ", "))
		return nil
	}
	if resume && runID == "" && out != "" {
		m, err := benchmark.LoadMetadata(out)
		if err != nil {
			return fmt.Errorf("-resume: %w", err)
		}
		runID = m.RunID
		if points == "" {
			points = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(m.Concurrency)), ","), "[]")
		}
	}
	if resume && out == "" {
		return errors.New("-resume needs -out: the directory of the sweep to continue")
	}
	if runID == "" {
		runID = time.Now().UTC().Format("20060102-150405")
	}
	if stack == "" || points == "" {
		flag.Usage()
		return errors.New("-stack and -concurrency are required")
	}
	concurrency, err := parsePoints(points)
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join("bench-results", stack+"-"+runID)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	env := map[string]string{}
	if kubeconfig != "" {
		env["KUBECONFIG"] = kubeconfig
	}
	s, err := automation.SelectStack(ctx, automation.Options{ProjectDir: projectDir, Stack: stack, EnvVars: env})
	if err != nil {
		return err
	}
	c, err := s.Config(ctx)
	if err != nil {
		return err
	}
	outputs, err := s.Outputs(ctx)
	if err != nil {
		return err
	}
	namespace, _ := outputs["namespace"].Value.(string)
	if namespace == "" {
		return fmt.Errorf("stack %s has no namespace output: run `pulumi up` first", stack)
	}
	if g, _ := outputs["graphName"].Value.(string); g != c.GraphName {
		return fmt.Errorf("stack %s deployed graph %q but its config names %q: run `pulumi up` first", stack, g, c.GraphName)
	}

	restConfig, err := stackRestConfig(ctx, s.Stack, kubeconfig, c.Kubernetes.Context)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	upLog, err := os.Create(filepath.Join(out, "pulumi-up.log"))
	if err != nil {
		return err
	}
	defer func() { _ = upLog.Close() }()

	start := time.Now()
	sweep := &benchmark.Sweep{
		Config: &c, Namespace: namespace, Kube: kube, Dynamic: dyn,
		Exec: benchmark.PodExecutor{Config: restConfig, Client: kube},
		Restart: func(ctx context.Context, id string) error {
			_, _ = fmt.Fprintf(upLog, "\n=== pulumi up with restart.id=%s, restart.strategy=Parallel\n", id)
			return s.Restart(ctx, id, "Parallel", optup.ProgressStreams(upLog), optup.ErrorProgressStreams(upLog))
		},
		Concurrency: concurrency, RunID: runID, OutDir: out, StageTrace: trace, NoRestart: noRestart, RestartBy: restartBy,
		ErrorBudget: errorBudget, Resume: resume, PruneClaim: pruneClaim, Stack: stack, ProgramCommit: programCommit(projectDir),
		Heartbeat: heartbeat,
		Progress: func(e benchmark.Event) {
			fmt.Printf("%8s %s\n", time.Since(start).Round(time.Second), e)
		},
	}
	fmt.Printf("benchmark sweep of %s (graph %s/%s, %d GPUs, speculative decoding %s): concurrency %s, run %s, results in %s; pulumi up's output in %s\n",
		stack, namespace, c.GraphName, c.GPUs(), c.Speculative.Mode, points, runID, out, upLog.Name())
	res, err := sweep.Run(ctx)
	if len(res.Points) > 0 {
		fmt.Println()
		if werr := benchmark.WriteMarkdown(os.Stdout, benchmark.Series{GPUs: c.GPUs(), Points: res.Points}); werr != nil {
			return werr
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted after %d of %d points (the running Job and the helper pod are deleted; -resume -out %s continues): %w", len(res.Points), len(concurrency), out, err)
	}
	return err
}

// programCommit is the project's git commit, with "+dirty" when its working tree has changes;
// empty outside a git checkout.
func programCommit(dir string) string {
	rev, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += "+dirty"
	}
	return commit
}

func parsePoints(s string) ([]int, error) {
	var points []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-concurrency: %q is not a positive number", f)
		}
		points = append(points, n)
	}
	return points, nil
}

// stackRestConfig is the client config the stack's own updates use: its minimax-m3:kubeconfig
// when it holds one (and -kubeconfig does not name a file), else the kubeconfig file; with the
// stack's context either way. A stack kubeconfig that cannot be read is an error, never a fall
// back to a local file whose context of the same name may be another cluster.
func stackRestConfig(ctx context.Context, s auto.Stack, kubeconfigFile, kubeContext string) (*rest.Config, error) {
	if kubeconfigFile == "" {
		v, err := s.GetConfig(ctx, config.Key(config.KubeconfigKey))
		switch {
		case err == nil && v.Value != "":
			cfg, err := cluster.RESTConfigFromKubeconfig([]byte(v.Value), kubeContext)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", config.Key(config.KubeconfigKey), err)
			}
			return cfg, nil
		case err != nil && !strings.Contains(err.Error(), "not found"):
			return nil, fmt.Errorf("reading the stack's %s: %w", config.Key(config.KubeconfigKey), err)
		}
	}
	return restConfig(kubeconfigFile, kubeContext)
}

// restConfig is the client config of a kubeconfig file and context, as the Kubernetes provider
// reads them.
func restConfig(kubeconfig, kubeContext string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
}
