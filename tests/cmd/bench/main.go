package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"

	"minimax-m3/automation"
	"minimax-m3/tests/framework/localcluster"
	"minimax-m3/tests/framework/localstack"
)

func main() {
	// `bench automation-preview <project> <stack>` is one measured command: a preview through the
	// Automation API, with the program inline.
	if len(os.Args) == 4 && os.Args[1] == "automation-preview" {
		if err := automationPreview(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "automation preview:", err)
			os.Exit(1)
		}
		return
	}
	runs := flag.Int("runs", 5, "measured runs per command (after one warm-up run)")
	only := flag.String("only", "", "measure only the commands whose name contains this")
	hold := flag.Bool("hold", false, "deploy both stacks, print the environment to reach them, and wait for Ctrl-C (for profiling by hand)")
	flag.Parse()
	if err := run(context.Background(), *runs, *only, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type command struct{ name, profile, cmd string }

func run(ctx context.Context, runs int, only string, hold bool) error {
	if _, err := exec.LookPath("hyperfine"); err != nil {
		return fmt.Errorf("hyperfine is not installed (Debian: apt-get install hyperfine): %w", err)
	}
	root, err := localstack.RepoRoot()
	if err != nil {
		return err
	}
	recipe := os.Getenv("MINIMAX_M3_RECIPE")
	if recipe == "" {
		recipe = filepath.Join(root, "..", "shared", "reference", "minimax-m3")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "minimax-m3-bench")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	fmt.Println("== starting the local API server with the CRDs from", os.Getenv("MINIMAX_M3_CRDS"))
	cluster, err := localcluster.Start(filepath.Join(root, ".toolchain", "bin"), os.Getenv("MINIMAX_M3_CRDS"))
	if err != nil {
		return err
	}
	cluster.StopOnSignal()
	defer func() { _ = cluster.Stop() }()

	project := filepath.Join(work, "project")
	if err := localstack.CopyProgram(root, project); err != nil {
		return err
	}
	cli, err := localstack.NewCLI(root, filepath.Join(work, "state"), cluster.Kubeconfig)
	if err != nil {
		return err
	}
	for _, stack := range []string{"agg", "disagg"} {
		fmt.Printf("== up of stack %s (awaits off)\n", stack)
		if err := cli.Deploy(ctx, project, stack, os.Stdout); err != nil {
			return err
		}
	}

	if hold {
		fmt.Printf("== both stacks are up in %s; in another shell:\n", project)
		for _, kv := range cli.Env[len(os.Environ()):] {
			fmt.Printf("export %s\n", kv)
		}
		fmt.Printf("cd %s\n== Ctrl-C stops the API server\n", project)
		select {}
	}

	var cmds []command
	for _, p := range []string{"agg", "disagg"} {
		files := []string{"model-cache/model-cache.yaml", "model-cache/model-download.yaml", "vllm/" + p + "-gb200-agentic/deploy.yaml"}
		var args []string
		for _, f := range files {
			args = append(args, "-f", filepath.Join(recipe, f))
		}
		// The recipe's command as its README gives it (client-side apply: against live objects it
		// reads the API's OpenAPI schema for its three-way merge), and the fastest run of the same
		// check: server-side apply, the merge done by the API server, validation kept.
		cmds = append(cmds,
			command{"recipe: kubectl apply --dry-run=server (" + p + ")", p,
				"kubectl apply --dry-run=server -n " + localstack.Namespace(p) + " " + strings.Join(args, " ")},
			command{"recipe: kubectl apply --server-side --dry-run=server (" + p + ")", p,
				"kubectl apply --server-side --dry-run=server -n " + localstack.Namespace(p) + " " + strings.Join(args, " ")})
	}
	for _, s := range []string{"agg", "disagg"} {
		cmds = append(cmds,
			command{"pulumi preview --stack " + s + " (CLI)", s, "cd " + project + " && pulumi preview --stack " + s},
			command{"pulumi preview --stack " + s + " (Automation API)", s, self + " automation-preview " + project + " " + s},
		)
	}
	cmds = append(cmds,
		command{"pulumi up --stack agg, no changes (CLI)", "agg", "cd " + project + " && pulumi up --stack agg --yes --skip-preview"},
		command{"make render STACK=agg", "agg", "make -s -C " + root + " render STACK=agg OUT=" + filepath.Join(work, "render") + " NAMESPACE=local-agg"},
		command{"unit suite (make unit)", "agg", "make -s -C " + root + " unit"},
	)
	var selected []command
	for _, c := range cmds {
		if only == "" || strings.Contains(c.name, only) || strings.HasPrefix(c.name, "recipe") {
			selected = append(selected, c)
		}
	}

	results := filepath.Join(work, "results.json")
	args := []string{"--warmup", "1", "--runs", fmt.Sprint(runs), "--export-json", results, "--style", "basic"}
	for _, c := range selected {
		args = append(args, "-n", c.name, c.cmd)
	}
	h := exec.CommandContext(ctx, "hyperfine", args...)
	h.Env = cli.Env
	h.Stdout, h.Stderr = os.Stdout, os.Stderr
	if err := h.Run(); err != nil {
		return fmt.Errorf("hyperfine: %w", err)
	}
	return table(os.Stdout, results, selected)
}

// table prints the medians and their ratio to the recipe's dry run of the same profile.
func table(out io.Writer, path string, cmds []command) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r struct {
		Results []struct {
			Command string  `json:"command"`
			Median  float64 `json:"median"`
			Min     float64 `json:"min"`
			Max     float64 `json:"max"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	median := map[string]float64{}
	for _, x := range r.Results {
		median[x.Command] = x.Median
	}
	_, _ = fmt.Fprintln(out, "\n| command | median | min–max | × recipe dry run | × fastest recipe run |")
	_, _ = fmt.Fprintln(out, "|---|---:|---:|---:|---:|")
	for i, x := range r.Results {
		asWritten := median["recipe: kubectl apply --dry-run=server ("+cmds[i].profile+")"]
		fastest := min(asWritten, median["recipe: kubectl apply --server-side --dry-run=server ("+cmds[i].profile+")"])
		_, _ = fmt.Fprintf(out, "| %s | %.2f s | %.2f–%.2f s | %.1f× | %.1f× |\n", x.Command, x.Median, x.Min, x.Max, x.Median/asWritten, x.Median/fastest)
	}
	return nil
}

// automationPreview previews a stack of a project copy through the Automation API, the program
// inline (no program build, no language host).
func automationPreview(project, stack string) error {
	ctx := context.Background()
	env := map[string]string{}
	for _, k := range []string{"PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_HOME", "PULUMI_SKIP_UPDATE_CHECK", "KUBECONFIG", "PATH"} {
		env[k] = os.Getenv(k)
	}
	s, err := automation.NewStack(ctx, automation.Options{ProjectDir: project, Stack: stack, EnvVars: env})
	if err != nil {
		return err
	}
	_, err = s.Preview(ctx, optpreview.ProgressStreams(io.Discard))
	return err
}
