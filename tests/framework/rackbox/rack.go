package rackbox

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Labels and taints a GB200 pool's nodes carry, as the NVIDIA GPU operator's feature discovery
// and a managed GB200 node pool set them.
const (
	// CliqueLabel is the NVLink clique of a node (GPU feature discovery's nvidia.com/gpu.clique:
	// <cluster UUID>.<clique id>); every tray of one NVL72 rack shares it. It is the
	// placement.topologyKey that keeps a graph's workers in one NVLink domain.
	CliqueLabel = "nvidia.com/gpu.clique"
	// RackLabel names the rack a node belongs to; tests pin a stack's workers to their own rack with it.
	RackLabel = "rackbox.minimax-m3.io/rack"
	// GPU is the extended resource the NVIDIA device plugin advertises.
	GPU corev1.ResourceName = "nvidia.com/gpu"
	// PoolLabel tells a rack's GPU trays from the CPU nodes that run frontends and Jobs.
	PoolLabel = "rackbox.minimax-m3.io/pool"
)

// Rack is the shape of one simulated GB200 NVL72 rack: the one definition a test changes to
// shrink it (a rack with exactly the GPUs a stack needs is "full").
type Rack struct {
	// Name names the rack's nodes (<name>-tray-<n>) and is its clique id.
	Name string
	// Trays is the number of compute trays (nodes); an NVL72 has 18.
	Trays int
	// GPUsPerTray is each tray's nvidia.com/gpu capacity; a GB200 tray has 4.
	GPUsPerTray int
	// CPU, Memory and EphemeralStorage are each tray's allocatable resources: two Grace CPUs of
	// 72 cores and 480 GB LPDDR5X each, less what the system reserves.
	CPU, Memory, EphemeralStorage string
	// Labels are added to every tray's own: a pool of several racks is racks sharing a label the
	// workers select (nothing pinned per rack).
	Labels map[string]string
	// Taints are the pool's taints. ExtendedResourceToleration (enabled in the box's API server,
	// as on managed GPU pools) tolerates nvidia.com/gpu for every pod that requests a GPU.
	Taints []corev1.Taint
}

// NVL72 is a full GB200 NVL72 rack: 18 trays of 4 GPUs (72), arm64, tainted like a managed GB200
// node pool.
func NVL72(name string) Rack {
	return Rack{
		Name:             name,
		Trays:            18,
		GPUsPerTray:      4,
		CPU:              "140",
		Memory:           "880Gi",
		EphemeralStorage: "3500Gi",
		Taints: []corev1.Taint{
			{Key: string(GPU), Value: "present", Effect: corev1.TaintEffectNoSchedule},
			{Key: corev1.LabelArchStable, Value: "arm64", Effect: corev1.TaintEffectNoSchedule},
		},
	}
}

// WithGPUs is the rack shrunk (or grown) to exactly gpus GPUs, a whole number of trays.
func (r Rack) WithGPUs(gpus int) Rack {
	if gpus%r.GPUsPerTray != 0 {
		panic(fmt.Sprintf("rackbox: %d GPUs is not a whole number of %d-GPU trays", gpus, r.GPUsPerTray))
	}
	r.Trays = gpus / r.GPUsPerTray
	return r
}

// GPUs is the rack's GPU count.
func (r Rack) GPUs() int { return r.Trays * r.GPUsPerTray }

// Clique is the value of the rack's nodes' CliqueLabel.
func (r Rack) Clique() string { return "rackbox-fabric." + r.Name }

// NodeNames are the rack's node names, in tray order.
func (r Rack) NodeNames() []string {
	names := make([]string, r.Trays)
	for i := range names {
		names[i] = fmt.Sprintf("%s-tray-%02d", r.Name, i+1)
	}
	return names
}

// Nodes are the rack's Node objects as a kubelet would register them, for kwok to run.
func (r Rack) Nodes() []*corev1.Node {
	var nodes []*corev1.Node
	for _, name := range r.NodeNames() {
		res := corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse(r.CPU),
			corev1.ResourceMemory:           resource.MustParse(r.Memory),
			corev1.ResourceEphemeralStorage: resource.MustParse(r.EphemeralStorage),
			corev1.ResourcePods:             resource.MustParse("110"),
			GPU:                             *resource.NewQuantity(int64(r.GPUsPerTray), resource.DecimalSI),
		}
		labels := map[string]string{
			corev1.LabelArchStable:         "arm64",
			CliqueLabel:                    r.Clique(),
			RackLabel:                      r.Name,
			PoolLabel:                      "gb200",
			"nvidia.com/gpu.product":       "NVIDIA-GB200",
			"nvidia.com/gpu.count":         strconv.Itoa(r.GPUsPerTray),
			corev1.LabelInstanceTypeStable: "gb200-nvl72-tray",
		}
		for k, v := range r.Labels {
			labels[k] = v
		}
		nodes = append(nodes, fakeNode(name, labels, r.Taints, res))
	}
	return nodes
}

// CPUNode is one of the cluster's CPU nodes, where frontends, the download and smoke-test Jobs and
// the benchmark run (no taints, no GPUs).
func CPUNode(name string) *corev1.Node {
	return fakeNode(name, map[string]string{corev1.LabelArchStable: "amd64", PoolLabel: "cpu"}, nil, corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("64"),
		corev1.ResourceMemory:           resource.MustParse("256Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
		corev1.ResourcePods:             resource.MustParse("110"),
	})
}

func fakeNode(name string, labels map[string]string, taints []corev1.Taint, res corev1.ResourceList) *corev1.Node {
	labels[corev1.LabelHostname] = name
	labels[corev1.LabelOSStable] = "linux"
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: labels,
			// kwok runs the nodes that carry this annotation.
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Spec:   corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
}

// The NVIDIA DRA driver's compute-domain driver, its DeviceClasses (the driver's Helm chart:
// deviceclass-compute-domain-{default-channel,daemon}.yaml) and device attribute domain.
const (
	ComputeDomainDriver = "compute-domain.nvidia.com"
	ChannelDeviceClass  = "compute-domain-default-channel.nvidia.com"
	DaemonDeviceClass   = "compute-domain-daemon.nvidia.com"
)

// DeviceClasses are the compute-domain DeviceClasses the driver's chart installs.
func DeviceClasses() []*resourcev1.DeviceClass {
	class := func(name, cel string) *resourcev1.DeviceClass {
		return &resourcev1.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}},
		}
	}
	return []*resourcev1.DeviceClass{
		class(ChannelDeviceClass, "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel' && device.attributes['compute-domain.nvidia.com'].id == 0"),
		class(DaemonDeviceClass, "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'"),
	}
}

// ResourceSlice is what the driver's compute-domain kubelet plugin publishes for its node (it
// needs NVML and an IMEX-capable GPU, so the box publishes it in its place): one pool named after
// the node, holding the IMEX channel 0 and the IMEX daemon device (the plugin enumerates 2048
// channels and publishes only channel 0).
func ResourceSlice(node string) *resourcev1.ResourceSlice {
	device := func(name, typ string) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To(typ)},
			"id":   {IntValue: ptr.To[int64](0)},
		}}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + ComputeDomainDriver},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   ComputeDomainDriver,
			NodeName: ptr.To(node),
			Pool:     resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices:  []resourcev1.Device{device("channel-0", "channel"), device("daemon-0", "daemon")},
		},
	}
}
