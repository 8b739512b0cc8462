package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"minimax-m3/portal/httpapi"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"

	"minimax-m3/automation"
	"minimax-m3/portal"
	"minimax-m3/tests/framework/dynamooperator"
	"minimax-m3/tests/framework/gogc"
	"minimax-m3/tests/framework/rackbox"
)

func main() {
	// Ctrl-C cancels what runs (an up is interrupted as Ctrl-C on pulumi up does) and everything
	// started is stopped on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
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

	// The box's servers and the stacks' CLI runs collect garbage less often: on a small machine,
	// CPU is what the local run waits on.
	if err := gogc.Raise(); err != nil {
		return err
	}
	fmt.Println("== starting the rack box: kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1, with the CRDs from", os.Getenv("MINIMAX_M3_CRDS"))
	box, err := rackbox.Start(ctx, rackbox.Options{Bin: bin, CRDs: os.Getenv("MINIMAX_M3_CRDS")})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("== stopping the rack box")
		_ = box.Stop()
	}()
	racks, err := strconv.Atoi(cmp.Or(os.Getenv("RACKS"), "1"))
	if err != nil || racks < 1 || racks == 2 {
		// Two racks of the partly used pool hold agg but no clique holds disagg.
		return fmt.Errorf("RACKS=%q: want 1 (one empty rack) or 3 and more (a pool partly used by another team)", os.Getenv("RACKS"))
	}
	if err := addPool(ctx, box, racks); err != nil {
		return err
	}
	fmt.Printf("== the box's kubeconfig, to watch with kubectl while it runs:\n   export KUBECONFIG=%s\n   kubectl get nodes -L %s; kubectl get pods -A -o wide\n", box.Kubeconfig, rackbox.CliqueLabel)
	source := os.Getenv("MINIMAX_M3_DYNAMO_OPERATOR")
	if source == "" {
		source = filepath.Join(root, "..", "shared", "reference", "dynamo-operator")
	}
	fmt.Println("== starting the Dynamo operator (built from", source+")")
	op, err := dynamooperator.Start(ctx, dynamooperator.Options{
		Binary: filepath.Join(bin, "dynamo-operator"), Kubeconfig: box.Kubeconfig, Config: box.Config,
		CRDDir: filepath.Join(source, "config", "crd", "bases"),
	})
	if err != nil {
		return err
	}
	defer func() { _ = op.Stop() }()

	work, err := os.MkdirTemp("", "minimax-m3-local")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	// One backend for both stacks, as a team's would be: the portal lists them both.
	env := map[string]string{
		"PULUMI_BACKEND_URL":       "file://" + filepath.Join(work, "state"),
		"PULUMI_CONFIG_PASSPHRASE": "local-run",
		"PULUMI_HOME":              filepath.Join(root, ".toolchain", "pulumi-home"),
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"KUBECONFIG":               box.Kubeconfig,
		"PATH":                     os.Getenv("PATH"),
	}
	if err := os.MkdirAll(filepath.Join(work, "state"), 0o755); err != nil {
		return err
	}
	for _, stack := range []string{"agg", "disagg"} {
		if err := runStack(ctx, root, filepath.Join(work, stack), stack, env); err != nil {
			return fmt.Errorf("stack %s: %w", stack, err)
		}
	}
	if os.Getenv("PORTAL") == "" {
		return nil
	}
	return servePortal(ctx, root, filepath.Join(work, "portal"), env)
}

// servePortal serves the portal's page on the stacks until ctx ends.
func servePortal(ctx context.Context, root, stateDir string, env map[string]string) error {
	m, err := portal.New(portal.Options{ProjectDir: root, StateDir: stateDir, BackendURL: env["PULUMI_BACKEND_URL"], EnvVars: env})
	if err != nil {
		return err
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	token := hex.EncodeToString(b)
	srv, err := httpapi.NewServer(ctx, m, token)
	if err != nil {
		return err
	}
	addr := os.Getenv("PORTAL_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	fmt.Printf("\n== the portal's page on both stacks: http://%s/ (sign in with the token %s; Ctrl-C stops everything)\n", ln.Addr(), token)
	<-ctx.Done()
	return hs.Close()
}

// addPool adds the GB200 pool: one empty NVL72 rack, or (RACKS=n) n racks of which the first
// three are partly used by another team's pods: 2 trays free on the first (room for neither
// stack), 4 on the second (agg's three workers, the tightest fit) and 9 on the third (disagg's
// six). The stacks land on the second and third; `kubectl get pods -A -o wide` shows it.
func addPool(ctx context.Context, box *rackbox.Box, racks int) error {
	free := []int{2, 4, 9}
	for i := range racks {
		rack := rackbox.NVL72(fmt.Sprintf("nvl72-%d", i+1))
		if racks == 1 {
			rack = rackbox.NVL72("nvl72")
		}
		if err := box.AddRack(ctx, rack); err != nil {
			return err
		}
		used := 0
		if racks > 1 && i < len(free) {
			used = rack.Trays - free[i]
			if _, err := box.Occupy(ctx, "other-team", rack.NodeNames()[:used]...); err != nil {
				return err
			}
		}
		fmt.Printf("== GB200 NVL72 rack %s (clique %s): %d trays of %d GPUs (kwok), %d of them used by another team's pods\n",
			rack.Name, rack.Clique(), rack.Trays, rack.GPUsPerTray, used)
	}
	fmt.Println("== the NVIDIA DRA driver's DeviceClasses and the racks' ResourceSlices")
	return nil
}

func runStack(ctx context.Context, root, dir, stack string, env map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := automation.CopyProject(root, dir); err != nil {
		return err
	}
	fmt.Printf("\n== stack %s: the committed Pulumi.%s.yaml plus a local namespace, a placeholder token and GB200 placement\n", stack, stack)
	cfg := auto.ConfigMap{
		"minimax-m3:namespace.name":        {Value: "minimax-m3-" + stack},
		"minimax-m3:hfToken":               {Value: "hf_local_run_placeholder", Secret: true},
		"minimax-m3:placement.topologyKey": {Value: rackbox.CliqueLabel},
	}
	roles := []string{"worker"}
	if stack == "disagg" {
		roles = []string{"prefillWorker", "decodeWorker"}
	}
	// The workers select the GB200 pool (the default tolerations cover its GPU and arm64 taints);
	// which rack of it is the program's choice.
	for _, role := range roles {
		cfg[fmt.Sprintf("minimax-m3:%s.scheduling.nodeSelector[%q]", role, rackbox.PoolLabel)] = auto.ConfigValue{Value: "gb200"}
	}
	s, err := automation.NewStack(ctx, automation.Options{
		ProjectDir: dir,
		Stack:      stack,
		Config:     cfg,
		EnvVars:    env,
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
