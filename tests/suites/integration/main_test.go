package integration

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"minimax-m3/tests/framework/gogc"
	"minimax-m3/tests/framework/localcluster"
)

// apiServer is a plain local API server (no controllers): the one every test shares (cluster).
type apiServer struct {
	kubeconfig string
	config     *rest.Config
	client     client.Client
}

// cluster is the local API server every test shares.
var cluster struct {
	root string // the project checkout
	bin  string // the built toolchain
	apiServer
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return fail(err)
	}
	cluster.root = root
	cluster.bin = filepath.Join(root, ".toolchain", "bin")
	if _, err := os.Stat(filepath.Join(cluster.bin, "pulumi")); err != nil {
		return fail(fmt.Errorf("pulumi is not built: run `make toolchain` first (%v)", err))
	}
	// Pulumi and its plugins come from the built toolchain, ahead of anything else on PATH. Every
	// Go build the tests start (the program in each project copy and checkout, the commands) is
	// -trimpath, as `make integration` builds this binary: a copy's packages then compile once, not
	// once per folder, and the dependencies compile once for all of them (buildFlags).
	for k, v := range map[string]string{
		"PATH":                     cluster.bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"PULUMI_HOME":              filepath.Join(root, ".toolchain", "pulumi-home"),
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"GOFLAGS":                  buildFlags(os.Getenv("GOFLAGS")),
	} {
		if err := os.Setenv(k, v); err != nil {
			return fail(err)
		}
	}

	// Every server and Go process the suite starts collects garbage less often: CPU is what the
	// suite waits on.
	if err := gogc.Raise(); err != nil {
		return fail(err)
	}
	// The tests' clients log the API server's warnings (deprecated versions the operator reads)
	// through controller-runtime's logger; they are not the tests' output.
	ctrllog.SetLogger(logr.Discard())
	flag.Parse()
	if err := takeParallelFlag(); err != nil {
		return fail(err)
	}
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok {
			testTimeout = d
		}
	}
	c, err := startAPIServer()
	if err != nil {
		return fail(err)
	}
	// Stopped on every path out, failures included; on a signal; and before `go test -timeout`
	// would end the process (startAPIServer).
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the API server:", err)
		}
	}()
	cluster.kubeconfig, cluster.config, cluster.client = c.Kubeconfig, c.Config, c.Client
	defer stopBox()
	if built.dir, err = os.MkdirTemp("", "minimax-m3-commands"); err != nil {
		return fail(err)
	}
	defer func() { _ = os.RemoveAll(built.dir) }()
	return m.Run()
}

// buildFlags is GOFLAGS with -trimpath added unless it is there.
func buildFlags(goflags string) string {
	flags := strings.Fields(goflags)
	if !slices.Contains(flags, "-trimpath") {
		flags = append(flags, "-trimpath")
	}
	return strings.Join(flags, " ")
}

// testTimeout is `go test -timeout`. A signal, or that timeout, ends the process without running
// deferred calls or test cleanups, and kube-apiserver and etcd would outlive it: every server the
// suite starts is stopped on a signal (localcluster.OnSignal) and shortly before the timeout.
var testTimeout time.Duration

// startAPIServer starts a plain local API server with the CRDs of MINIMAX_M3_CRDS, stopped on a
// signal and before the test timeout; the caller stops it when done with it.
func startAPIServer() (*localcluster.Cluster, error) {
	c, err := localcluster.Start(cluster.bin, os.Getenv("MINIMAX_M3_CRDS"))
	if err != nil {
		return nil, err
	}
	c.StopOnSignal()
	c.StopBefore(testTimeout)
	return c, nil
}

// built are the project's commands the tests run, each built once for every test.
var built struct {
	dir  string
	mu   sync.Mutex
	done map[string]error
}

// command builds one of the project's packages (./cmd/policy, ./tests/cmd/prcheck) once, as name, and returns its path.
func command(t *testing.T, pkg, name string) string {
	t.Helper()
	return buildOnce(t, name, func(out string) *exec.Cmd {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = cluster.root
		if rest, ok := strings.CutPrefix(pkg, "./tests/"); ok { // the tests' module
			cmd = exec.Command("go", "build", "-o", out, "./"+rest)
			cmd.Dir = filepath.Join(cluster.root, "tests")
		}
		return cmd
	})
}

// builtProgram is the program built once for the suite as the language host builds it in a
// project copy: `go build -o <target>` in a copy of its sources, outside the clone's git checkout
// (so no VCS stamp sets it apart from a copy's build).
func builtProgram(t *testing.T) string {
	t.Helper()
	return buildOnce(t, "minimax-m3", func(out string) *exec.Cmd {
		src := filepath.Join(built.dir, "program-source")
		require.NoError(t, os.MkdirAll(src, 0o755))
		copySourceInto(t, src)
		cmd := exec.Command("go", "build", "-o", out)
		cmd.Dir = src
		return cmd
	})
}

// buildOnce runs the build cmd(out) makes the first time name is asked for, and returns out, the
// path it builds.
func buildOnce(t *testing.T, name string, cmd func(out string) *exec.Cmd) string {
	t.Helper()
	out, err := buildOnceErr(name, func(out string) (*exec.Cmd, error) { return cmd(out), nil })
	require.NoError(t, err)
	return out
}

// buildOnceErr is buildOnce off any test: cmd may fail to prepare the build.
func buildOnceErr(name string, cmd func(out string) (*exec.Cmd, error)) (string, error) {
	built.mu.Lock()
	defer built.mu.Unlock()
	out := filepath.Join(built.dir, name)
	err, ok := built.done[out]
	if !ok {
		c, perr := cmd(out)
		if perr != nil {
			err = perr
		} else if b, berr := c.CombinedOutput(); berr != nil {
			err = fmt.Errorf("%s: %w\n%s", strings.Join(c.Args, " "), berr, b)
		}
		if built.done == nil {
			built.done = map[string]error{}
		}
		built.done[out] = err
	}
	return out, err
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "integration tests cannot run:", err)
	return 1
}
