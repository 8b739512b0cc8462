package rackbox

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// playHardware runs, until Stop, what the box plays in place of hardware-bound components: the
// compute-domain-controller's workload part and the storage provisioner.
func (b *Box) playHardware() error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := manager.New(b.Config, manager.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		return err
	}
	cd := &unstructured.Unstructured{}
	cd.SetGroupVersionKind(ComputeDomainGVK)
	if err := builder.ControllerManagedBy(mgr).Named("rackbox-compute-domain").For(cd).
		Complete(&computeDomainController{c: mgr.GetClient()}); err != nil {
		return err
	}
	if err := builder.ControllerManagedBy(mgr).Named("rackbox-provisioner").For(&corev1.PersistentVolumeClaim{}).
		Complete(&provisioner{c: mgr.GetClient()}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stopPlay, b.played = cancel, make(chan struct{})
	go func() {
		defer close(b.played)
		_ = mgr.Start(ctx)
	}()
	return nil
}

// ComputeDomainGVK is the NVIDIA DRA driver's ComputeDomain.
var ComputeDomainGVK = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomain"}

// The compute-domain-controller's finalizer and labels (its computedomain.go).
const (
	computeDomainFinalizer = "resource.nvidia.com/computeDomain"
	computeDomainLabel     = "resource.nvidia.com/computeDomain"
	computeDomainTarget    = "resource.nvidia.com/computeDomainTarget"
)

// computeDomainController plays what the driver's compute-domain-controller does for a
// ComputeDomain's workloads (cmd/compute-domain-controller: computedomain.go onAddOrUpdate and
// resourceclaimtemplate.go): it puts its finalizer on the ComputeDomain and creates the channel
// ResourceClaimTemplate the spec names in the ComputeDomain's namespace (one request "channel" of
// the default-channel DeviceClass, with the ComputeDomainChannelConfig); on deletion it deletes
// the template, then removes its finalizer.
type computeDomainController struct{ c client.Client }

func (r *computeDomainController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cd := &unstructured.Unstructured{}
	cd.SetGroupVersionKind(ComputeDomainGVK)
	if err := r.c.Get(ctx, req.NamespacedName, cd); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	rctName, _, _ := unstructured.NestedString(cd.Object, "spec", "channel", "resourceClaimTemplate", "name")
	rct := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: cd.GetNamespace(), Name: rctName}}
	if cd.GetDeletionTimestamp() != nil {
		if !slices.Contains(cd.GetFinalizers(), computeDomainFinalizer) {
			return reconcile.Result{}, nil
		}
		if err := r.c.Get(ctx, client.ObjectKeyFromObject(rct), rct); err == nil {
			if rct.Labels[computeDomainLabel] == string(cd.GetUID()) {
				if err := r.c.Delete(ctx, rct); client.IgnoreNotFound(err) != nil {
					return reconcile.Result{}, err
				}
			}
		} else if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		cd.SetFinalizers(slices.DeleteFunc(cd.GetFinalizers(), func(f string) bool { return f == computeDomainFinalizer }))
		return reconcile.Result{}, client.IgnoreNotFound(r.c.Update(ctx, cd))
	}
	if !slices.Contains(cd.GetFinalizers(), computeDomainFinalizer) {
		cd.SetFinalizers(append(cd.GetFinalizers(), computeDomainFinalizer))
		if err := r.c.Update(ctx, cd); err != nil {
			return reconcile.Result{}, err
		}
	}
	mode, _, _ := unstructured.NestedString(cd.Object, "spec", "channel", "allocationMode")
	if mode == "" {
		mode = "Single"
	}
	rct.Labels = map[string]string{computeDomainLabel: string(cd.GetUID()), computeDomainTarget: "Workload"}
	rct.Spec.Spec.Devices = resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: ChannelDeviceClass}}},
		Config: []resourcev1.DeviceClaimConfiguration{{
			Requests: []string{"channel"},
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver: ComputeDomainDriver,
				Parameters: runtime.RawExtension{Raw: fmt.Appendf(nil,
					`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":%q,"allocationMode":%q}`, cd.GetUID(), mode)},
			}},
		}},
	}
	return reconcile.Result{}, ignoreExists(r.c.Create(ctx, rct))
}

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
