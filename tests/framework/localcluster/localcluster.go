package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Cluster is a running local API server.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig for an admin user (file mode 0600).
	Kubeconfig string
	Config     *rest.Config
	Client     client.Client

	env      *envtest.Environment
	dir      string
	stopOnce sync.Once
	stopErr  error
}

// Binaries the toolchain folder must hold.
var Binaries = []string{"kube-apiserver", "etcd", "kubectl"}

// Options change how the API server runs.
type Options struct {
	// Admission lists admission plugins to enable beyond the API server's defaults. The
	// ServiceAccount plugin, which envtest turns off, is turned back on when it is listed (its
	// controllers then have to run: kube-controller-manager's service-account controller).
	Admission []string
	// APIServerFlags are kube-apiserver flags beyond envtest's (name without dashes, value).
	APIServerFlags map[string]string
}

// Start starts the API server with binaries from binDir and the CRDs in crdDir.
func Start(binDir, crdDir string) (*Cluster, error) { return StartWith(binDir, crdDir, Options{}) }

// StartWith is Start with Options.
func StartWith(binDir, crdDir string, o Options) (*Cluster, error) {
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return nil, fmt.Errorf("%s is not built: run `make toolchain` (%w)", b, err)
		}
	}
	if crdDir == "" {
		return nil, errors.New("MINIMAX_M3_CRDS must name the folder holding the DynamoGraphDeployment and ComputeDomain CRDs")
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     []string{crdDir},
		ErrorIfCRDPathMissing: true,
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	// No gzip between processes on one host (uncompressedClients): it costs both sides CPU and
	// saves nothing on loopback.
	gates := "APIResponseCompression=false"
	for k, v := range o.APIServerFlags {
		if k == "feature-gates" {
			v += "," + gates
		}
		args.Set(k, v)
	}
	if _, ok := o.APIServerFlags["feature-gates"]; !ok {
		args.Set("feature-gates", gates)
	}
	if len(o.Admission) > 0 {
		args.Set("enable-admission-plugins", strings.Join(o.Admission, ","))
		if slices.Contains(o.Admission, "ServiceAccount") {
			args.Disable("disable-admission-plugins")
		}
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	c := &Cluster{Config: cfg, env: env}
	if err := c.setUp(); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) setUp() error {
	dir, err := os.MkdirTemp("", "minimax-m3-kube")
	if err != nil {
		return err
	}
	c.dir = dir
	user, err := c.env.AddUser(envtest.User{Name: "pulumi", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return err
	}
	uncompressedClients(kc)
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		return err
	}
	c.Config.DisableCompression = true
	c.Client, err = client.New(c.Config, client.Options{})
	return err
}

// uncompressedClients has every client of kubeconfig (the provider, the controllers, kwok, the
// operators) ask for uncompressed responses, as `disable-compression: true` does. The API server
// gzips a large response for a client that accepts it, whatever its feature gates say for the
// OpenAPI document: each Kubernetes provider start downloads that document, and gzipping it anew
// for each start was a tenth of the box's API server CPU in a profile of the suite.
func uncompressedClients(kc *clientcmdapi.Config) {
	for _, cl := range kc.Clusters {
		cl.DisableCompression = true
	}
}

// ServiceAccountSigningKey is the private key the API server signs service-account tokens with,
// which kube-controller-manager needs to issue them.
func (c *Cluster) ServiceAccountSigningKey() string {
	return filepath.Join(c.env.ControlPlane.GetAPIServer().CertDir, "sa-signer.key")
}

// Stop stops the API server and etcd and removes the kubeconfig. It may be called more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		if c.dir != "" {
			_ = os.RemoveAll(c.dir)
		}
		c.stopErr = c.env.Stop()
	})
	return c.stopErr
}

// StopOnSignal stops the servers and exits when the process is interrupted or terminated, so an
// aborted run leaves no kube-apiserver or etcd behind (OnSignal).
func (c *Cluster) StopOnSignal() { OnSignal(c.Stop) }

// onSignal are the stops OnSignal registered.
var onSignal struct {
	mu    sync.Mutex
	once  sync.Once
	stops []func() error
}

// OnSignal runs stop when the process is interrupted or terminated, then exits (deferred calls and
// test cleanups do not run on that path). Every stop registered in the process runs, newest first,
// before the one handler exits: a process that starts several servers leaves none behind.
func OnSignal(stop func() error) {
	onSignal.mu.Lock()
	onSignal.stops = append(onSignal.stops, stop)
	onSignal.mu.Unlock()
	onSignal.once.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		go func() {
			s := <-ch
			fmt.Fprintf(os.Stderr, "%v: stopping the local servers\n", s)
			onSignal.mu.Lock()
			for _, stop := range slices.Backward(onSignal.stops) {
				_ = stop()
			}
			os.Exit(130)
		}()
	})
}

// StopBefore stops the servers shortly before a deadline (such as `go test -timeout`, which ends
// the process without running deferred calls).
func (c *Cluster) StopBefore(timeout time.Duration) {
	StopBefore(timeout, "the local API server", c.Stop)
}

// StopBefore runs stop (of what) 30 s before timeout, when the timeout is over a minute.
func StopBefore(timeout time.Duration, what string, stop func() error) {
	if timeout <= time.Minute {
		return
	}
	time.AfterFunc(timeout-30*time.Second, func() {
		fmt.Fprintf(os.Stderr, "the test timeout is near: stopping %s\n", what)
		_ = stop()
	})
}
