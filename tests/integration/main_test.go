// Package integration runs the program through the real Pulumi engine and Kubernetes provider
// against a real kube-apiserver (started by controller-runtime's envtest) with the real Dynamo and
// ComputeDomain CRDs installed from $MINIMAX_M3_CRDS.
//
// The API server runs no controllers. Where a test needs one, it plays it and says so: the Job
// controller (marking the download Job complete or failed), the Dynamo operator (marking the graph
// Ready) and the garbage collector (releasing foreground deletions).
package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// cluster is the local API server every test shares.
var cluster struct {
	root       string // the project checkout
	bin        string // the built toolchain
	kubeconfig string
	config     *rest.Config
	client     client.Client
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return fail(err)
	}
	cluster.root = root
	cluster.bin = filepath.Join(root, ".toolchain", "bin")
	for _, b := range []string{"pulumi", "pulumi-language-go", "kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(cluster.bin, b)); err != nil {
			return fail(fmt.Errorf("%s is not built: run `make toolchain` first (%v)", b, err))
		}
	}
	crds := os.Getenv("MINIMAX_M3_CRDS")
	if crds == "" {
		return fail(fmt.Errorf("MINIMAX_M3_CRDS must name the folder holding the DynamoGraphDeployment and ComputeDomain CRDs"))
	}

	// Pulumi and its plugins come from the built toolchain, ahead of anything else on PATH.
	os.Setenv("PATH", cluster.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	os.Setenv("KUBEBUILDER_ASSETS", cluster.bin)

	env := &envtest.Environment{CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		return fail(fmt.Errorf("starting kube-apiserver and etcd: %w", err))
	}
	// Stopped on every path out, failures included.
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the API server:", err)
		}
	}()
	cluster.config = cfg

	dir, err := os.MkdirTemp("", "minimax-m3-kube")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	user, err := env.AddUser(envtest.User{Name: "pulumi", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fail(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fail(err)
	}
	cluster.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cluster.kubeconfig, kubeconfig, 0o600); err != nil {
		return fail(err)
	}
	if cluster.client, err = client.New(cfg, client.Options{}); err != nil {
		return fail(err)
	}
	return m.Run()
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "integration tests cannot run:", err)
	return 1
}
