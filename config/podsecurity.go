package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// WorkerCapabilities are the capabilities the recipe's workers add to their container: IPC_LOCK
// (NCCL and NIXL pin host memory), SYS_PTRACE (CUDA IPC between the engine's processes) and
// SYS_RESOURCE (raising the locked-memory limit). No pod of a stack adds any other.
var WorkerCapabilities = []corev1.Capability{"IPC_LOCK", "SYS_PTRACE", "SYS_RESOURCE"}

// PodSecurity lists what in a pod spec reaches past its pod, into the node or the cluster: the
// node's namespaces (hostNetwork, hostPID, hostIPC), a hostPath volume, a privileged container or
// one adding a capability beyond WorkerCapabilities, an unmasked /proc, a ServiceAccount of its own
// (its token's rights), or a node named directly (around the scheduler and the placement check).
// No pod the program writes needs any of them, so only a podTemplatePatch can bring one in, and
// on a fleet many teams share it would be a way from a stack onto a GPU node as root. Each entry
// names the field.
func PodSecurity(spec *corev1.PodSpec) []string {
	var out []string
	for field, on := range map[string]bool{"hostNetwork": spec.HostNetwork, "hostPID": spec.HostPID, "hostIPC": spec.HostIPC} {
		if on {
			out = append(out, fmt.Sprintf("spec.%s: shares the node's namespace", field))
		}
	}
	for i, vol := range spec.Volumes {
		if vol.HostPath != nil {
			out = append(out, fmt.Sprintf("spec.volumes[%d] (%s): mounts the node's %s (hostPath)", i, vol.Name, vol.HostPath.Path))
		}
	}
	if sa := cmp.Or(spec.ServiceAccountName, spec.DeprecatedServiceAccount); sa != "" && sa != "default" {
		out = append(out, fmt.Sprintf("spec.serviceAccountName: runs with ServiceAccount %q and its rights; the stack's pods run as the namespace's default", sa))
	}
	if spec.NodeName != "" {
		out = append(out, fmt.Sprintf("spec.nodeName: binds to node %q around the scheduler and the placement check", spec.NodeName))
	}
	check := func(kind string, i int, name string, sc *corev1.SecurityContext) {
		if sc == nil {
			return
		}
		at := fmt.Sprintf("spec.%s[%d] (%s).securityContext", kind, i, name)
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, at+".privileged: runs with every device and capability of the node")
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			out = append(out, at+".procMount: unmasks the node's /proc")
		}
		if sc.Capabilities != nil {
			var extra []string
			for _, c := range sc.Capabilities.Add {
				if !slices.Contains(WorkerCapabilities, c) {
					extra = append(extra, string(c))
				}
			}
			if len(extra) > 0 {
				out = append(out, fmt.Sprintf("%s.capabilities.add: %s (a stack's pods add at most %s)", at, strings.Join(extra, ", "), capabilityList()))
			}
		}
	}
	for i, c := range spec.InitContainers {
		check("initContainers", i, c.Name, c.SecurityContext)
	}
	for i, c := range spec.Containers {
		check("containers", i, c.Name, c.SecurityContext)
	}
	for i, c := range spec.EphemeralContainers {
		check("ephemeralContainers", i, c.Name, c.SecurityContext)
	}
	slices.Sort(out)
	return out
}

func capabilityList() string {
	s := make([]string, len(WorkerCapabilities))
	for i, c := range WorkerCapabilities {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}
