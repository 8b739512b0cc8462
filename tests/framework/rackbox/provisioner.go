package rackbox

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// quietOnce sets controller-runtime's process-wide logger once.
var quietOnce sync.Once

// quietControllerRuntime gives controller-runtime's process-wide logger somewhere to go (nowhere):
// left unset, the first line logged through it after 30 s prints "log.SetLogger(...) was never
// called" and a stack trace, which reads like a crash at the end of `make local`.
func quietControllerRuntime() { quietOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) }) }

// startPlayers runs, until Stop, what the box plays in place of a storage system and of the GPU
// trays' hardware: the provisioner of its storage class, and each tray's DRA kubelet plugin and
// IMEX daemon (imex.go).
func (b *Box) startPlayers() error {
	// The managers' own logs go to logger below; what controller-runtime's process-wide logger
	// would get (its informers' internals) is not the box's to show.
	quietControllerRuntime()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	// Several boxes may run in one process (a test with a cluster of its own): each provisioner is a
	// controller of its own box, so the process-wide check of unique controller names does not apply.
	// What the players log (a reconcile's error) is kept with the servers' output (Logs).
	b.players = &tailBuffer{max: 64 << 10}
	logger := funcr.New(func(prefix, args string) { _, _ = fmt.Fprintln(b.players, prefix, args) }, funcr.Options{})
	mgr, err := manager.New(b.Config, manager.Options{Scheme: scheme, Logger: logger, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		return err
	}
	if err := builder.ControllerManagedBy(mgr).Named("rackbox-provisioner").For(&corev1.PersistentVolumeClaim{}).
		Complete(&provisioner{c: mgr.GetClient()}); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(b.Config)
	if err != nil {
		return err
	}
	events := record.NewBroadcaster()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	ctx, cancel := context.WithCancel(context.Background())
	if err := startTrays(ctx, mgr, events); err != nil {
		cancel()
		events.Shutdown()
		return err
	}
	b.stopPlay, b.played = cancel, make(chan struct{})
	go func() {
		defer close(b.played)
		defer events.Shutdown()
		_ = mgr.Start(ctx)
	}()
	return nil
}

// ComputeDomainGVK is the NVIDIA DRA driver's ComputeDomain.
var ComputeDomainGVK = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomain"}

// ComputeDomainFinalizer is the compute-domain-controller's finalizer on a ComputeDomain.
const ComputeDomainFinalizer = "resource.nvidia.com/computeDomain"

// provisionerName is the box's storage class provisioner.
const provisionerName = "rackbox.minimax-m3.io/rwx"

// provisioner answers the PV controller the way an external provisioner does: for a claim the PV
// controller marked for this provisioner (volume.kubernetes.io/storage-provisioner), a
// PersistentVolume of the claim's size, modes and class, reserved for it (claimRef). The PV
// controller then binds the two. The volume is an NFS export nobody mounts (no kubelet here).
type provisioner struct{ c client.Client }

func (p *provisioner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := p.c.Get(ctx, req.NamespacedName, pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.Annotations["volume.kubernetes.io/storage-provisioner"] != provisionerName || pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "pvc-" + string(pvc.UID),
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": provisionerName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			StorageClassName:              StorageClass,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "rwx.rackbox.invalid", Path: "/" + string(pvc.UID)}},
			VolumeMode:                    pvc.Spec.VolumeMode,
		},
	}
	return reconcile.Result{}, ignoreExists(p.c.Create(ctx, pv))
}
