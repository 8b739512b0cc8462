package config

import "fmt"

// Network is the starter's network-interface Component (and provider presets) for one worker role.
type Network struct {
	// SocketInterface sets NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME.
	SocketInterface string `json:"socketInterface"`
	// GlooSocketInterface overrides GLOO_SOCKET_IFNAME when it differs from NCCL's.
	GlooSocketInterface string `json:"glooSocketInterface"`
	// RDMAResource is an extended resource key (e.g. rdma.example.com/device) requested and limited
	// with RDMACount.
	RDMAResource string `json:"rdmaResource"`
	RDMACount    string `json:"rdmaCount"`
	// UCXNetDevices pins UCX to devices (UCX_NET_DEVICES) for NIXL transfers.
	UCXNetDevices  string            `json:"ucxNetDevices"`
	PodAnnotations map[string]string `json:"podAnnotations"`
	// GKERoCE applies the starter's provider-networking/gke-roce preset.
	GKERoCE *GKERoCE `json:"gkeRoce"`
}

// GKERoCE is GKE multi-networking with RoCE NICs: interface annotations, per-network resources
// and NCCL settings.
type GKERoCE struct {
	DefaultInterface string             `json:"defaultInterface"`
	RDMAInterfaces   []GKERDMAInterface `json:"rdmaInterfaces"`
	// NetworkResourceQuantity is requested for each network and its .IP resource.
	NetworkResourceQuantity string `json:"networkResourceQuantity"`
	CrossNIC                string `json:"crossNic"`
}

// GKERDMAInterface binds one pod interface to one GKE network.
type GKERDMAInterface struct {
	InterfaceName string `json:"interfaceName"`
	Network       string `json:"network"`
}

// Env is what the network settings add to a worker's environment, in order: the socket
// interfaces NCCL and Gloo bind (the GKE RoCE default interface unless set), NCCL_CROSS_NIC for GKE
// RoCE, and UCX_NET_DEVICES.
func (n Network) Env() []EnvVar {
	socket, gloo := n.SocketInterface, n.GlooSocketInterface
	if n.GKERoCE != nil && socket == "" {
		socket = n.GKERoCE.DefaultInterface
	}
	if gloo == "" {
		gloo = socket
	}
	var env []EnvVar
	if socket != "" {
		env = append(env, EnvVar{"NCCL_SOCKET_IFNAME", socket}, EnvVar{"GLOO_SOCKET_IFNAME", gloo})
	}
	if n.GKERoCE != nil && n.GKERoCE.CrossNIC != "" {
		env = append(env, EnvVar{"NCCL_CROSS_NIC", n.GKERoCE.CrossNIC})
	}
	if n.UCXNetDevices != "" {
		env = append(env, EnvVar{"UCX_NET_DEVICES", n.UCXNetDevices})
	}
	return env
}

func (n Network) validate(v validator, k string) {
	switch {
	case n.RDMAResource != "" && n.RDMACount == "":
		v.add(k+".rdmaCount", "is required with rdmaResource %q (the same count is requested and limited)", n.RDMAResource)
	case n.RDMAResource == "" && n.RDMACount != "":
		v.add(k+".rdmaResource", "is required with rdmaCount %q", n.RDMACount)
	case n.RDMAResource != "":
		v.qualifiedName(k+".rdmaResource", n.RDMAResource)
		v.positiveQuantity(k+".rdmaCount", n.RDMACount)
	}
	v.annotations(k+".podAnnotations", n.PodAnnotations)
	if g := n.GKERoCE; g != nil {
		v.nonEmpty(k+".gkeRoce.defaultInterface", g.DefaultInterface)
		if len(g.RDMAInterfaces) == 0 {
			v.add(k+".gkeRoce.rdmaInterfaces", "needs at least one RDMA interface")
		}
		for i, ri := range g.RDMAInterfaces {
			v.nonEmpty(fmt.Sprintf("%s.gkeRoce.rdmaInterfaces[%d].interfaceName", k, i), ri.InterfaceName)
			v.qualifiedName(fmt.Sprintf("%s.gkeRoce.rdmaInterfaces[%d].network", k, i), "networking.gke.io.networks/"+ri.Network)
		}
		v.positiveQuantity(k+".gkeRoce.networkResourceQuantity", g.NetworkResourceQuantity)
	}
}
