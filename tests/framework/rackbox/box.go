package rackbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/teamboundary"
	"minimax-m3/tests/framework/localcluster"
)

// StorageClass is the box's default storage class: ReadWriteMany, bound at once, answered by the
// box's provisioner.
const StorageClass = "rackbox-rwx"

// TeamNamespaces are the namespaces whose writes the box's API server audits (Box.AuditLog).
var TeamNamespaces = []string{"box-guarded-a", "box-guarded-b"}

// AuditLogName is the audit log's file in the box's directory.
const AuditLogName = "audit.log"

func auditPolicyYAML() string {
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
  namespaces: [` + strings.Join(TeamNamespaces, ", ") + `]
- level: None
`
}

// AuditLog is the path of the API server's audit log (one JSON event a line).
func (b *Box) AuditLog() string { return filepath.Join(b.dir, AuditLogName) }

// WorkerRuntimeClass is the GPU workers' RuntimeClass, which the box's API server exempts from Pod
// Security admission (teamboundary.PodSecurityAdmissionConfiguration).
const WorkerRuntimeClass = "nvidia"

// Options say how to start the box.
type Options struct {
	// Bin is the built toolchain (.toolchain/bin); CRDs the folder of the Dynamo and ComputeDomain CRDs.
	Bin, CRDs string
	// CPUNodes is the number of CPU nodes for frontends and Jobs; 2 when 0.
	CPUNodes int
	// Log receives the servers' output as it comes (it is kept for failure reports either way).
	Log io.Writer
}

// Box is a running control plane with its simulated nodes.
type Box struct {
	*localcluster.Cluster
	procs    []*process
	dir      string
	stopPlay context.CancelFunc
	played   chan struct{}
	kubelet  *kubelet
	players  *tailBuffer
	stopOnce sync.Once
	stopErr  error
}

// Start starts the control plane, kwok, the compute-domain-controller and the provisioner, creates
// the CPU nodes, the DeviceClasses and the storage class, and returns once the CPU nodes are Ready
// and schedulable.
func Start(ctx context.Context, o Options) (*Box, error) {
	if o.CPUNodes == 0 {
		o.CPUNodes = 2
	}
	dir, err := os.MkdirTemp("", "rackbox")
	if err != nil {
		return nil, err
	}
	// The kubelets' endpoint and the API server trust each other (kubeletPKI): the server's
	// certificate checked against the kubelet CA, the API server's client certificate required.
	pki, err := newKubeletPKI(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// As a site that guards its team namespaces configures its API server: Pod Security exempts
	// the GPU workers' RuntimeClass, which the team namespaces' admission policy checks instead
	// (package teamboundary).
	admissionConfig := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(admissionConfig, []byte(teamboundary.PodSecurityAdmissionConfiguration(WorkerRuntimeClass)), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// An audit log of the writes in the team namespaces (TeamNamespaces), at Metadata: who wrote
	// what, through whom (impersonatedUser).
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyYAML()), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cluster, err := localcluster.StartWith(o.Bin, o.CRDs, localcluster.Options{
		// ServiceAccount as in any cluster; ExtendedResourceToleration as on managed GPU pools: a
		// pod that requests nvidia.com/gpu tolerates the nvidia.com/gpu taint.
		Admission: []string{"ServiceAccount", "ExtendedResourceToleration"},
		APIServerFlags: map[string]string{
			// As kubeadm sets it: the API server reaches a kubelet (exec) at its node's InternalIP.
			"kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
			"kubelet-certificate-authority":   pki.caFile,
			"kubelet-client-certificate":      pki.clientCertFile,
			"kubelet-client-key":              pki.clientKeyFile,
			"admission-control-config-file":   admissionConfig,
			"audit-policy-file":               auditPolicy,
			"audit-log-path":                  filepath.Join(dir, AuditLogName),
		},
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	b := &Box{Cluster: cluster, dir: dir}
	if err := b.start(ctx, o, pki); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

func (b *Box) start(ctx context.Context, o Options, pki *kubeletPKI) error {
	dir := b.dir
	stagesFile := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesFile, []byte(stages), 0o600); err != nil {
		return err
	}
	// Every node's kubelet endpoint (for exec): kwok writes its port into each node's status.
	var err error
	if b.kubelet, err = startKubelet(b.Client, pki); err != nil {
		return err
	}
	servers := []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{
			"--kubeconfig=" + b.Kubeconfig, "--leader-elect=false", "--controllers=*",
			"--service-account-private-key-file=" + b.ServiceAccountSigningKey(), "--use-service-account-credentials=false",
			"--bind-address=127.0.0.1", "--secure-port=0",
			// Quicker than a real cluster's defaults where a test waits on them; semantics unchanged.
			"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		}},
		{"kube-scheduler", []string{"--kubeconfig=" + b.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0"}},
		{"kwok", []string{
			"--kubeconfig=" + b.Kubeconfig, "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--config=" + stagesFile, "--server-address=127.0.0.1:0", "--node-lease-duration-seconds=40",
			"--cidr=10.128.0.1/16", "--node-ip=127.0.0.1", "--node-port=" + strconv.Itoa(b.kubelet.port),
		}},
	}
	for _, s := range servers {
		p, err := startProcess(s.name, filepath.Join(o.Bin, s.name), s.args, o.Log)
		if err != nil {
			return err
		}
		b.procs = append(b.procs, p)
	}
	if err := b.install(ctx); err != nil {
		return err
	}
	// The driver's compute-domain-controller, as its Helm chart runs it (in the driver's
	// namespace, which its IMEX DaemonSets go to). Its daemon image is never pulled here.
	cdc, err := startProcess("compute-domain-controller", filepath.Join(o.Bin, "compute-domain-controller"), []string{
		"--kubeconfig=" + b.Kubeconfig, "--namespace=" + DriverNamespace, "--pod-name=compute-domain-controller",
		"--image-name=nvcr.io/nvidia/k8s-dra-driver-gpu:rackbox", "--log-verbosity-cd-daemon=0",
	}, o.Log)
	if err != nil {
		return err
	}
	b.procs = append(b.procs, cdc)
	for i := range o.CPUNodes {
		if err := b.Client.Create(ctx, CPUNode(fmt.Sprintf("cpu-%02d", i+1))); err != nil {
			return err
		}
	}
	if err := b.startPlayers(); err != nil {
		return err
	}
	return b.waitNodes(ctx, client.MatchingLabels{PoolLabel: "cpu"}, o.CPUNodes)
}

// DriverNamespace is the NVIDIA DRA driver's namespace (its Helm chart's default).
const DriverNamespace = "nvidia-dra-driver-gpu"

// install creates what a GB200 cluster's operators install: the DRA driver's namespace, its IMEX
// daemons' service account and its compute-domain DeviceClasses (the driver's chart) and the
// default RWX storage class.
func (b *Box) install(ctx context.Context) error {
	if err := b.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DriverNamespace}}); err != nil {
		return err
	}
	if err := b.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DaemonServiceAccount, Namespace: DriverNamespace}}); err != nil {
		return err
	}
	for _, dc := range DeviceClasses() {
		if err := b.Client.Create(ctx, dc); err != nil {
			return err
		}
	}
	// The GPU workers' runtime, as the GPU operator installs it (kwok runs any class alike).
	if err := b.Client.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: WorkerRuntimeClass}, Handler: WorkerRuntimeClass}); err != nil {
		return err
	}
	immediate := storagev1.VolumeBindingImmediate
	retain := corev1.PersistentVolumeReclaimRetain
	return b.Client.Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true",
		}},
		Provisioner:       provisionerName,
		VolumeBindingMode: &immediate,
		ReclaimPolicy:     &retain,
	})
}

// AddRack creates a rack's trays, publishes their ResourceSlices and waits until the scheduler
// can place pods on them (Ready, and the node lifecycle controller's not-ready taint gone).
func (b *Box) AddRack(ctx context.Context, r Rack) error {
	for _, n := range r.Nodes() {
		if err := b.Client.Create(ctx, n); err != nil {
			return fmt.Errorf("rack %s: %w", r.Name, err)
		}
		if err := b.Client.Create(ctx, ResourceSlice(n.Name)); err != nil {
			return fmt.Errorf("rack %s: %w", r.Name, err)
		}
	}
	return b.waitNodes(ctx, client.MatchingLabels{RackLabel: r.Name}, r.Trays)
}

// RemoveRack deletes a rack's trays and their ResourceSlices.
func (b *Box) RemoveRack(ctx context.Context, r Rack) error {
	var errs []error
	for _, name := range r.NodeNames() {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		errs = append(errs, client.IgnoreNotFound(b.Client.Delete(ctx, n)))
		errs = append(errs, client.IgnoreNotFound(b.Client.Delete(ctx, ResourceSlice(name))))
	}
	return errors.Join(errs...)
}

// waitNodes waits for want nodes matching sel to be Ready with no taint but their own.
func (b *Box) waitNodes(ctx context.Context, sel client.MatchingLabels, want int) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := b.alive(); err != nil {
			return false, err
		}
		var nodes corev1.NodeList
		if err := b.Client.List(ctx, &nodes, sel); err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			if nodeReady(&n) {
				ready++
			} else {
				last = fmt.Sprintf("node %s: conditions %v, taints %v", n.Name, n.Status.Conditions, n.Spec.Taints)
			}
		}
		return ready == want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d nodes %v to be Ready and schedulable: %w (%s)", want, sel, err, last)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// alive is an error when a server of the box has exited.
func (b *Box) alive() error {
	for _, p := range b.procs {
		if ok, err := p.exited(); ok {
			return err
		}
	}
	return nil
}

// Logs is the last output of each server, for a failure report.
func (b *Box) Logs() string {
	s := ""
	for _, p := range b.procs {
		s += fmt.Sprintf("--- %s (last output)\n%s\n", p.name, tailString(p.out.String(), 4<<10))
	}
	if b.players != nil {
		s += fmt.Sprintf("--- the box's players (last output)\n%s\n", tailString(b.players.String(), 4<<10))
	}
	return s
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// Stop stops the provisioner, the compute-domain-controller, kwok, the scheduler, the
// controller-manager, the kubelets' exec endpoint (ending the execs it runs) and the API server.
// It is safe to call more than once (StopOnSignal, StopBefore, a test's cleanup).
func (b *Box) Stop() error {
	b.stopOnce.Do(func() { b.stopErr = b.stop() })
	return b.stopErr
}

func (b *Box) stop() error {
	if b.stopPlay != nil {
		b.stopPlay()
		<-b.played
	}
	for i := len(b.procs) - 1; i >= 0; i-- {
		b.procs[i].stop()
	}
	if b.kubelet != nil {
		b.kubelet.stop()
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
	return b.Cluster.Stop()
}

// StopOnSignal stops the box and exits when the process is interrupted or terminated, so an
// aborted run leaves no server behind (localcluster.OnSignal: with every other server the process
// registered).
func (b *Box) StopOnSignal() { localcluster.OnSignal(b.Stop) }

// StopBefore stops the box (its servers, the kubelet endpoint and its folder, with the kubelet
// client's key) shortly before a deadline such as `go test -timeout`, which ends the process
// without running deferred calls.
func (b *Box) StopBefore(timeout time.Duration) {
	localcluster.StopBefore(timeout, "the rack box", b.Stop)
}

// ignoreExists makes AlreadyExists a success.
func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
