// Command localrun is the main job on an embedded default, with no cluster of the user's: it starts
// a local kube-apiserver with the real CRDs, then previews and applies both stacks to it through
// the Automation API, printing each plan and the stack outputs, and stops the server.
//
// No nodes, scheduler or controllers run here, so no download Job can complete and no graph can
// become Ready: those two awaits are turned off for this run (and only here).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"

	"minimax-m3/automation"
	"minimax-m3/tests/localcluster"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "local run:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	bin := filepath.Join(root, ".toolchain", "bin")
	if err := os.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return err
	}

	fmt.Println("== starting kube-apiserver and etcd on 127.0.0.1 with the CRDs from", os.Getenv("MINIMAX_M3_CRDS"))
	cluster, err := localcluster.Start(bin, os.Getenv("MINIMAX_M3_CRDS"))
	if err != nil {
		return err
	}
	cluster.StopOnSignal()
	defer func() {
		fmt.Println("== stopping the local API server")
		_ = cluster.Stop()
	}()

	work, err := os.MkdirTemp("", "minimax-m3-local")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	for _, stack := range []string{"agg", "disagg"} {
		if err := runStack(ctx, root, filepath.Join(work, stack), stack, cluster.Kubeconfig); err != nil {
			return fmt.Errorf("stack %s: %w", stack, err)
		}
	}
	return nil
}

func runStack(ctx context.Context, root, dir, stack, kubeconfig string) error {
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o755); err != nil {
		return err
	}
	if err := automation.CopyProject(root, dir); err != nil {
		return err
	}
	fmt.Printf("\n== stack %s: the committed Pulumi.%s.yaml plus a local namespace and a placeholder token\n", stack, stack)
	fmt.Println("   awaits turned off for this local run: modelDownload.waitForCompletion=false, readiness.waitForReady=false")
	s, err := automation.NewStack(ctx, automation.Options{
		ProjectDir: dir,
		Stack:      stack,
		Config: auto.ConfigMap{
			"minimax-m3:namespace.name":                  {Value: "minimax-m3-" + stack},
			"minimax-m3:hfToken":                         {Value: "hf_local_run_placeholder", Secret: true},
			"minimax-m3:modelDownload.waitForCompletion": {Value: "false"},
			"minimax-m3:readiness.waitForReady":          {Value: "false"},
		},
		EnvVars: map[string]string{
			"PULUMI_BACKEND_URL":       "file://" + filepath.Join(dir, "state"),
			"PULUMI_CONFIG_PASSPHRASE": "local-run",
			"PULUMI_HOME":              filepath.Join(root, ".toolchain", "pulumi-home"),
			"PULUMI_SKIP_UPDATE_CHECK": "true",
			"KUBECONFIG":               kubeconfig,
			"PATH":                     os.Getenv("PATH"),
		},
	})
	if err != nil {
		return err
	}
	fmt.Printf("\n== pulumi preview --stack %s\n", stack)
	if _, err := s.Preview(ctx, optpreview.ProgressStreams(os.Stdout), optpreview.ErrorProgressStreams(os.Stderr)); err != nil {
		return err
	}
	fmt.Printf("\n== pulumi up --stack %s\n", stack)
	res, err := s.Up(ctx, optup.ProgressStreams(os.Stdout), optup.ErrorProgressStreams(os.Stderr))
	if err != nil {
		return err
	}
	fmt.Printf("\n== outputs of stack %s\n", stack)
	keys := make([]string, 0, len(res.Outputs))
	for k := range res.Outputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  %-20s %v\n", k, res.Outputs[k].Value)
	}
	return nil
}
