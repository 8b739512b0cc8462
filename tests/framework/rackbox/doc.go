// Package rackbox is a GB200 rack in a box: a real Kubernetes control plane on 127.0.0.1
// (kube-apiserver and etcd through envtest, kube-controller-manager and kube-scheduler, all
// v1.37.2 built by `make toolchain`) whose nodes are simulated by kwok as the trays of GB200 NVL72
// racks, with DRA as on a GB200 cluster.
//
// What runs for real: every controller of kube-controller-manager (Deployment, ReplicaSet, Job,
// garbage collector, namespace, PV binder, ResourceClaim, service accounts, node lifecycle, ...),
// the scheduler with its DRA plugin (it allocates the ComputeDomain channel from the
// ResourceSlices), kwok's node and pod lifecycles, and the NVIDIA DRA driver's
// compute-domain-controller (built from the driver's source by `make toolchain`): it owns the
// ComputeDomain's finalizer, creates its channel ResourceClaimTemplate and its IMEX DaemonSet.
//
// What the box plays, because it needs hardware or a container runtime:
//   - the kubelet: kwok moves pods to Running and Ready and ends Job pods (stages.go); no image is
//     pulled and no process runs; every node's kubelet endpoint is the box's exec server
//     (kubelet.go), where a test says what a command does in its namespace (HandleExec). What goes
//     wrong on a real tray is played on demand (troubles.go): a pod annotated with a trouble gets
//     the status a kubelet writes for an image it cannot pull, a crash loop, an OOM kill or a
//     readiness probe that never passes, and a node made NotReady stops being heartbeated;
//   - the NVIDIA DRA driver's kubelet plugin (it needs NVML) and its IMEX daemon (it needs an
//     NVLink fabric): the ResourceSlice of each tray (ResourceSlice in rack.go), and the chain a
//     worker waits on before it starts (imex.go): the plugin labels the tray for the ComputeDomain,
//     the controller's real DaemonSet places a daemon there, the played daemon enters the tray in
//     its ComputeDomainClique once its pod is Ready, the controller copies that into the
//     ComputeDomain's status, and only then is the worker's claim prepared and the worker started;
//     until then the tray's kubelet records its FailedPrepareDynamicResources on the worker. A tray
//     can be given a daemon that never gets Ready or whose image cannot be pulled
//     (IMEXTroubleAnnotation);
//   - the NVIDIA device plugin: each tray registers nvidia.com/gpu capacity;
//   - a storage provisioner for the RWX class (provisioner.go), the way an external provisioner
//     answers the PV controller; the binding itself is the PV controller's.
package rackbox
