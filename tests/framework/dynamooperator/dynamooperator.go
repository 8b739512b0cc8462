package dynamooperator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options say which operator to run against which cluster.
type Options struct {
	// Binary is the built operator (.toolchain/bin/dynamo-operator).
	Binary string
	// Kubeconfig is the path of an admin kubeconfig of the cluster; Config the same as a rest config.
	Kubeconfig string
	Config     *rest.Config
	// CRDDir is the operator's own CRD folder (config/crd/bases of its source); the CRDs the API
	// server does not serve yet are installed from it, the others are left as they are.
	CRDDir string
	// Namespace is the operator's own namespace; dynamo-system when empty.
	Namespace string
	// Log receives the operator's output; discarded when nil.
	Log io.Writer
}

// Operator is a running operator process.
type Operator struct {
	Namespace string

	cmd      *exec.Cmd
	dir      string
	webhook  envtest.WebhookInstallOptions
	done     chan struct{}
	config   *rest.Config
	restore  []*apiextensionsv1.CustomResourceDefinition
	waitErr  error
	stopOnce sync.Once
	stopErr  error
	// startLog is the operator's output while it starts, to tell why it exited.
	startLog lockedBuffer
}

// lockedBuffer is a buffer the operator's output goroutines and Start share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		return len(p), nil // only the start matters
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// errPortTaken is a start that lost one of its free ports to another process between choosing
// and binding it (nothing holds a port here between the two).
var errPortTaken = errors.New("a port chosen for the operator was taken before it bound it")

// ClusterRoles are the ClusterRoles the configuration names: the operator binds them for the
// planner, the profiling jobs and the endpoint picker, and refuses to start a graph without them.
var ClusterRoles = []string{"dynamo-planner", "dynamo-dgdr-profiling", "dynamo-epp"}

// Start prepares the cluster, starts the operator and returns once its health endpoint answers.
func Start(ctx context.Context, o Options) (*Operator, error) {
	if o.Namespace == "" {
		o.Namespace = "dynamo-system"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("the Dynamo operator is not built: run `make toolchain` (%w)", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return nil, fmt.Errorf("unshare (util-linux) runs the operator with its namespace file: %w", err)
	}
	for attempt := 1; ; attempt++ {
		dir, err := os.MkdirTemp("", "dynamo-operator")
		if err != nil {
			return nil, err
		}
		op := &Operator{Namespace: o.Namespace, dir: dir, done: make(chan struct{}), config: o.Config}
		err = op.start(ctx, o)
		if err == nil {
			return op, nil
		}
		_ = op.Stop()
		// Free ports are chosen before the operator binds them: another process may take one in
		// between. Start again on new ports.
		if errors.Is(err, errPortTaken) && attempt < 3 {
			continue
		}
		return nil, err
	}
}

func (op *Operator) start(ctx context.Context, o Options) error {
	// A CA, a serving pair for 127.0.0.1 in a folder of its own and a free port for the webhook.
	op.webhook = envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	if err := op.webhook.PrepWithoutInstalling(); err != nil {
		return err
	}
	ca := op.webhook.LocalServingCAData
	if err := op.prepareCluster(ctx, o, ca); err != nil {
		return err
	}
	sa := filepath.Join(op.dir, "run", "secrets", "kubernetes.io", "serviceaccount")
	if err := os.MkdirAll(sa, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(sa, "namespace"), []byte(o.Namespace), 0o644); err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	health := fmt.Sprintf("127.0.0.1:%d", ports[1])
	configFile := filepath.Join(op.dir, "config.yaml")
	cfg := fmt.Sprintf(`apiVersion: operator.config.dynamo.nvidia.com/v1alpha1
kind: OperatorConfiguration
server:
  metrics: {bindAddress: 127.0.0.1, port: %d, secure: false}
  healthProbe: {bindAddress: 127.0.0.1, port: %d}
  webhook: {host: 127.0.0.1, port: %d, certDir: %q, certProvisionMode: manual}
leaderElection: {enabled: false}
mpi: {sshSecretName: mpi-run-ssh-secret, sshSecretNamespace: %s}
rbac: {plannerClusterRoleName: %s, dgdrProfilingClusterRoleName: %s, eppClusterRoleName: %s}
`, ports[0], ports[1], op.webhook.LocalServingPort, op.webhook.LocalServingCertDir, o.Namespace, ClusterRoles[0], ClusterRoles[1], ClusterRoles[2])
	if err := os.WriteFile(configFile, []byte(cfg), 0o600); err != nil {
		return err
	}

	// /run is private to the process's mount namespace: the bind shows the folder's secrets/ as
	// /var/run/secrets (/var/run links to /run) to the operator only.
	op.cmd = exec.Command("unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
		`mount --bind "$1" /run && exec "$2" --config "$3" --operator-version 0.0.0-local --kubeconfig "$4"`,
		"sh", filepath.Join(op.dir, "run"), o.Binary, configFile, o.Kubeconfig)
	out := io.MultiWriter(o.Log, &op.startLog)
	op.cmd.Stdout, op.cmd.Stderr = out, out
	op.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := op.cmd.Start(); err != nil {
		return fmt.Errorf("starting the operator: %w", err)
	}
	go func() { op.waitErr = op.cmd.Wait(); close(op.done) }()

	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-op.done:
			if strings.Contains(op.startLog.String(), "address already in use") {
				return fmt.Errorf("the operator exited while starting: %v: %w", op.waitErr, errPortTaken)
			}
			return fmt.Errorf("the operator exited while starting: %v", op.waitErr)
		case <-deadline.C:
			return errors.New("the operator's health endpoint did not answer within 2 minutes")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if resp, err := http.Get("http://" + health + "/readyz"); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return op.serveConversions(ctx, o, op.webhook.LocalServingPort, ca)
				}
			}
		}
	}
}

// Running reports whether the process is still running.
func (op *Operator) Running() bool {
	select {
	case <-op.done:
		return false
	default:
		return true
	}
}

// Stop stops the operator (SIGTERM, then SIGKILL after 10 s), removes its folders and puts back
// the CRD conversion settings Start changed. It may be called more than once.
func (op *Operator) Stop() error {
	op.stopOnce.Do(func() {
		if op.cmd != nil && op.cmd.Process != nil {
			_ = op.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-op.done:
			case <-time.After(10 * time.Second):
				_ = op.cmd.Process.Kill()
				<-op.done
			}
		}
		_ = os.RemoveAll(op.dir)
		_ = op.webhook.Cleanup()
		op.stopErr = op.restoreCRDs()
	})
	return op.stopErr
}

// serveConversions points the conversion webhooks of the operator's CRDs at the process itself.
// The manifests name the operator's Service, which the API server cannot reach here (no Pods, no
// network proxy), and the operator watches the older versions of its kinds, which the API server
// converts from the stored version through that webhook: so each CRD's webhook becomes the URL
// the operator serves on (https://127.0.0.1:<port>/convert) with the CA of its certificate. The
// operator checked the Service form and injected its CA once, at start, before answering health
// checks; its informers retry until the conversions work.
func (op *Operator) serveConversions(ctx context.Context, o Options, port int, ca []byte) error {
	c, err := client.New(o.Config, client.Options{})
	if err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/convert", port)
	for _, before := range op.restore {
		// The operator writes the same CRDs (its CA injection) while it starts: retry on a conflict.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			live := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: before.Name}, live); err != nil {
				return err
			}
			if live.Spec.Conversion == nil || live.Spec.Conversion.Webhook == nil {
				return fmt.Errorf("CRD %s has no conversion webhook after the operator started", live.Name)
			}
			live.Spec.Conversion.Webhook.ClientConfig = &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: ca}
			return c.Update(ctx, live)
		})
		if err != nil {
			return fmt.Errorf("pointing the conversion webhook of CRD %s at the operator: %w", before.Name, err)
		}
	}
	return nil
}

// restoreCRDs puts back the conversion settings Start changed, so the cluster serves the CRDs
// as it did before.
func (op *Operator) restoreCRDs() error {
	if len(op.restore) == 0 {
		return nil
	}
	c, err := client.New(op.config, client.Options{})
	if err != nil {
		return err
	}
	var errs []error
	for _, before := range op.restore {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: before.Name}, live); err != nil {
			errs = append(errs, err)
			continue
		}
		live.Spec.Conversion = before.Spec.Conversion
		if err := c.Update(context.Background(), live); err != nil {
			errs = append(errs, fmt.Errorf("restoring CRD %s: %w", before.Name, err))
		}
	}
	return errors.Join(errs...)
}

// prepareCluster creates what the operator's Helm chart would: its missing CRDs, its namespace,
// the webhook certificate Secret and the ClusterRoles it binds.
func (op *Operator) prepareCluster(ctx context.Context, o Options, ca []byte) error {
	c, err := client.New(o.Config, client.Options{})
	if err != nil {
		return err
	}
	if err := op.installMissingCRDs(ctx, c, o); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "webhook-server-cert", Namespace: o.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, secret, func() error {
		secret.Data = map[string][]byte{"ca.crt": ca}
		return nil
	}); err != nil {
		return err
	}
	for _, name := range ClusterRoles {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func (op *Operator) installMissingCRDs(ctx context.Context, c client.Client, o Options) error {
	if o.CRDDir == "" {
		return errors.New("the operator's CRD folder is not set")
	}
	read := envtest.CRDInstallOptions{Paths: []string{o.CRDDir}, ErrorIfPathMissing: true}
	if err := envtest.ReadCRDFiles(&read); err != nil {
		return fmt.Errorf("reading the operator's CRDs: %w", err)
	}
	var missing []*apiextensionsv1.CustomResourceDefinition
	for _, crd := range read.CRDs {
		live := &apiextensionsv1.CustomResourceDefinition{}
		err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, live)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, crd)
		case err != nil:
			return err
		case crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == apiextensionsv1.WebhookConverter:
			op.restore = append(op.restore, live.DeepCopy())
			if live.Spec.Conversion == nil || live.Spec.Conversion.Strategy != apiextensionsv1.WebhookConverter {
				// envtest drops conversion webhooks of kinds its scheme does not know; the
				// operator refuses to start unless the CRDs it converts declare theirs, as their
				// manifests do.
				live.Spec.Conversion = crd.Spec.Conversion.DeepCopy()
				if err := c.Update(ctx, live); err != nil {
					return fmt.Errorf("restoring the conversion webhook of CRD %s: %w", crd.Name, err)
				}
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err := envtest.InstallCRDs(o.Config, envtest.CRDInstallOptions{CRDs: missing})
	return err
}

// freePorts are n ports on 127.0.0.1 that nothing listens on.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
