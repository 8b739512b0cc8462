package config

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// WorkerCapabilities are the capabilities the recipe's workers add to their container: IPC_LOCK
// (NCCL and NIXL pin host memory), SYS_PTRACE (CUDA IPC between the engine's processes) and
// SYS_RESOURCE (raising the locked-memory limit). They are the one exemption from Pod Security
// "baseline" a stack's pods get, and only a worker's main container has it.
var WorkerCapabilities = []corev1.Capability{"IPC_LOCK", "SYS_PTRACE", "SYS_RESOURCE"}

// WorkerCapabilityNames are WorkerCapabilities as strings, for messages and policies.
func WorkerCapabilityNames() []string {
	out := make([]string, len(WorkerCapabilities))
	for i, c := range WorkerCapabilities {
		out[i] = string(c)
	}
	return out
}

// WorkerComponentTypes are the Dynamo component types of the recipe's worker pods (the operator's
// label nvidia.com/dynamo-component-type): the pods whose main container has the exemption.
var WorkerComponentTypes = []string{"worker", "prefill", "decode"}

// AllowedVolumeTypes are the volume sources a stack's pods may mount: what the program and the
// Dynamo operator write (the cache claim, ConfigMaps, the stack's Secrets, shared memory, the
// projected API token, the downward API). Anything else reaches storage outside the namespace (nfs,
// an inline csi driver, iscsi, ...), fetches code (gitRepo) or binds a volume by name (ephemeral).
var AllowedVolumeTypes = []string{"configMap", "downwardAPI", "emptyDir", "persistentVolumeClaim", "projected", "secret"}

// OperatorEnv are the variables the Dynamo operator writes into a graph's pods: which graph and
// component a process belongs to, how it discovers its peers, its ports and health. A value set in
// a stack's env would win over the operator's in some containers and lose in others; DYN_NAMESPACE
// of another graph joins that graph and receives its requests.
var OperatorEnv = []string{
	"DYN_COMPONENT", "DYN_DEPLOYMENT_CONFIG", "DYN_DISCOVERY_BACKEND", "DYN_FORWARDPASS_METRIC_PORT",
	"DYN_HEALTH_CHECK_ENABLED", "DYN_HTTP_PORT", "DYN_KUBE_DISCOVERY_MODE", "DYN_KV_TRANSFER_DOMAIN",
	"DYN_KV_TRANSFER_ENFORCEMENT", "DYN_KV_TRANSFER_PREFERRED_WEIGHT", "DYN_NAMESPACE", "DYN_NAMESPACE_PREFIX",
	"DYN_NAMESPACE_WORKER_SUFFIX", "DYN_PARENT_DGD_K8S_NAME", "DYN_PARENT_DGD_K8S_NAMESPACE",
	"DYN_SNAPSHOT_CONTROL_DIR", "DYN_SNAPSHOT_RESTORE_STANDBY", "DYN_SYSTEM_ENABLED", "DYN_SYSTEM_PORT",
	"DYN_SYSTEM_STARTING_HEALTH_STATUS", "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS", "DYN_TOPOLOGY_ENABLED",
	"DYN_TOPOLOGY_MOUNT_PATH",
}

// RuntimeEnvPrefixes are the prefixes of the variables the NVIDIA container runtime reads to choose
// a container's devices (NVIDIA_VISIBLE_DEVICES=all is every GPU of the node, other teams' included,
// where the runtime honours it) and CUDA's own device mask. Devices come from resource requests and
// DRA claims, never from env.
var RuntimeEnvPrefixes = []string{"NVIDIA_", "CUDA_VISIBLE_"}

// ReservedEnv says why a variable name is the runtime's or the operator's, or "" when a stack may
// set it.
func ReservedEnv(name string) string {
	for _, p := range RuntimeEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Sprintf("%s* is the NVIDIA container runtime's (which devices a container sees): devices come from GPU requests and claims", p)
		}
	}
	if slices.Contains(OperatorEnv, name) {
		return "the Dynamo operator writes it (which graph, component and ports the process has)"
	}
	return ""
}

// PodProfile is what a pod of the stack is, which decides what it may do beyond baseline.
type PodProfile struct {
	// Worker is a worker pod of the recipe: its main container may add WorkerCapabilities and run
	// as root (user 0), as the recipe's does.
	Worker bool
	// PriorityClasses are the priority classes the site allows; a pod naming another is refused.
	PriorityClasses []string
	// Secrets and ConfigMaps are the stack's own, which the pod may read (env, envFrom, volumes);
	// nil does not check names (Kubernetes already keeps a pod to its own namespace).
	Secrets, ConfigMaps []string
}

var baseline = psaapi.LevelVersion{Level: psaapi.LevelBaseline, Version: psaapi.LatestVersion()}

var evaluator = func() psapolicy.Evaluator {
	e, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		panic(err) // the library's own checks
	}
	return e
}()

// PodSecurity lists what in a pod reaches past the pod, by Kubernetes' own definition and by the
// fleet's: the Pod Security "baseline" level as the API server's admission evaluates it (the
// library it runs, k8s.io/pod-security-admission), with the one exemption of a worker's three
// capabilities; and what baseline allows but a fleet many teams share must not: volume types
// beyond AllowedVolumeTypes, user 0 outside a worker's main container, a privilege escalation
// asked for, a ServiceAccount of its own, a node named directly, a priority class the site did not
// list, the runtime's and the operator's variables, and Secrets or ConfigMaps that are not the
// stack's. Each entry names the field.
func PodSecurity(meta *metav1.ObjectMeta, spec *corev1.PodSpec, p PodProfile) []string {
	var out []string
	if meta == nil {
		meta = &metav1.ObjectMeta{}
	}
	checked := spec.DeepCopy()
	if p.Worker {
		for i := range checked.Containers {
			c := &checked.Containers[i]
			if c.Name != MainContainer || c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
				continue
			}
			c.SecurityContext.Capabilities.Add = slices.DeleteFunc(slices.Clone(c.SecurityContext.Capabilities.Add),
				func(cap corev1.Capability) bool { return slices.Contains(WorkerCapabilities, cap) })
		}
	}
	for _, r := range evaluator.EvaluatePod(baseline, meta, checked) {
		if r.Allowed {
			continue
		}
		msg := "Pod Security baseline: " + r.ForbiddenReason
		if r.ForbiddenDetail != "" {
			msg += " (" + r.ForbiddenDetail + ")"
		}
		out = append(out, msg)
	}
	if sa := cmp.Or(spec.ServiceAccountName, spec.DeprecatedServiceAccount); sa != "" && sa != "default" {
		out = append(out, fmt.Sprintf("spec.serviceAccountName: runs with ServiceAccount %q and its rights; the stack's pods run as the namespace's default", sa))
	}
	if spec.NodeName != "" {
		out = append(out, fmt.Sprintf("spec.nodeName: binds to node %q around the scheduler and the placement check", spec.NodeName))
	}
	if pc := spec.PriorityClassName; pc != "" && !slices.Contains(p.PriorityClasses, pc) {
		out = append(out, fmt.Sprintf("spec.priorityClassName: %q is not a priority class the site allows (%s): a higher class preempts other teams' pods", pc, listOrNone(p.PriorityClasses)))
	}
	if sc := spec.SecurityContext; sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		out = append(out, "spec.securityContext.runAsUser: 0 runs every container as root; only a worker's main container runs as root, as the recipe's does")
	}
	out = append(out, volumeProblems(spec.Volumes)...)
	out = append(out, Reads(spec, p.Secrets, p.ConfigMaps)...)
	each := func(kind string, i int, c *corev1.Container) {
		at := fmt.Sprintf("spec.%s[%d] (%s)", kind, i, c.Name)
		root := p.Worker && kind == "containers" && c.Name == MainContainer
		if sc := c.SecurityContext; sc != nil {
			if sc.RunAsUser != nil && *sc.RunAsUser == 0 && !root {
				out = append(out, at+".securityContext.runAsUser: 0 (root) outside a worker's main container, which alone runs as root as the recipe's does")
			}
			if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation && !root {
				out = append(out, at+".securityContext.allowPrivilegeEscalation: true lets a process gain more privileges than its parent (setuid); no container of the stack needs it")
			}
		}
		for j, e := range c.Env {
			if why := ReservedEnv(e.Name); why != "" {
				out = append(out, fmt.Sprintf("%s.env[%d] %s: %s", at, j, e.Name, why))
			}
		}
		for j, from := range c.EnvFrom {
			if from.ConfigMapRef != nil || from.Prefix != "" {
				out = append(out, fmt.Sprintf("%s.envFrom[%d]: only the stack's Secret, with no prefix, gives a container its variables wholesale (as the download's token): a ConfigMap or a prefix could carry the runtime's or the operator's variables; name each variable in env", at, j))
			}
		}
	}
	eachContainer(spec, each)
	slices.Sort(out)
	return out
}

func volumeProblems(volumes []corev1.Volume) []string {
	var out []string
	for i, vol := range volumes {
		// hostPath is baseline's own, reported by its check.
		if kind := volumeType(vol.VolumeSource); kind != "hostPath" && !slices.Contains(AllowedVolumeTypes, kind) {
			out = append(out, fmt.Sprintf("spec.volumes[%d] (%s): a %s volume; a stack's pods mount only %s", i, vol.Name, cmp.Or(kind, "unknown"), strings.Join(AllowedVolumeTypes, ", ")))
		}
	}
	return out
}

// Reads lists the Secrets and ConfigMaps a pod reads (env valueFrom, envFrom, volumes, projected
// sources) that are not among secrets and configMaps, the stack's own: in a namespace several
// stacks share, another stack's token is a Secret of the namespace too. A nil list is not checked.
func Reads(spec *corev1.PodSpec, secrets, configMaps []string) []string {
	var out []string
	ref := func(at, kind, name string) {
		names := secrets
		if kind == "ConfigMap" {
			names = configMaps
		}
		if names != nil && !slices.Contains(names, name) {
			out = append(out, fmt.Sprintf("%s: reads %s %q, which is not the stack's (%s)", at, kind, name, listOrNone(names)))
		}
	}
	for i, vol := range spec.Volumes {
		at := fmt.Sprintf("spec.volumes[%d] (%s)", i, vol.Name)
		switch {
		case vol.Secret != nil:
			ref(at, "Secret", vol.Secret.SecretName)
		case vol.ConfigMap != nil:
			ref(at, "ConfigMap", vol.ConfigMap.Name)
		case vol.Projected != nil:
			for _, s := range vol.Projected.Sources {
				if s.Secret != nil {
					ref(at, "Secret", s.Secret.Name)
				}
				if s.ConfigMap != nil {
					ref(at, "ConfigMap", s.ConfigMap.Name)
				}
			}
		}
	}
	each := func(kind string, i int, c *corev1.Container) {
		at := fmt.Sprintf("spec.%s[%d] (%s)", kind, i, c.Name)
		for j, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				ref(fmt.Sprintf("%s.env[%d] %s", at, j, e.Name), "Secret", r.Name)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				ref(fmt.Sprintf("%s.env[%d] %s", at, j, e.Name), "ConfigMap", r.Name)
			}
		}
		for j, from := range c.EnvFrom {
			if r := from.SecretRef; r != nil {
				ref(fmt.Sprintf("%s.envFrom[%d]", at, j), "Secret", r.Name)
			}
			if r := from.ConfigMapRef; r != nil {
				ref(fmt.Sprintf("%s.envFrom[%d]", at, j), "ConfigMap", r.Name)
			}
		}
	}
	eachContainer(spec, each)
	return out
}

// eachContainer calls f for every container of spec: init, regular, ephemeral.
func eachContainer(spec *corev1.PodSpec, f func(kind string, i int, c *corev1.Container)) {
	for i := range spec.InitContainers {
		f("initContainers", i, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		f("containers", i, &spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		f("ephemeralContainers", i, (*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
}

// volumeType is the json name of the one volume source set.
func volumeType(s corev1.VolumeSource) string {
	set := map[string]bool{
		"hostPath": s.HostPath != nil, "emptyDir": s.EmptyDir != nil, "gcePersistentDisk": s.GCEPersistentDisk != nil,
		"awsElasticBlockStore": s.AWSElasticBlockStore != nil, "gitRepo": s.GitRepo != nil, "secret": s.Secret != nil,
		"nfs": s.NFS != nil, "iscsi": s.ISCSI != nil, "glusterfs": s.Glusterfs != nil,
		"persistentVolumeClaim": s.PersistentVolumeClaim != nil, "rbd": s.RBD != nil, "flexVolume": s.FlexVolume != nil,
		"cinder": s.Cinder != nil, "cephfs": s.CephFS != nil, "flocker": s.Flocker != nil, "downwardAPI": s.DownwardAPI != nil,
		"fc": s.FC != nil, "azureFile": s.AzureFile != nil, "configMap": s.ConfigMap != nil, "vsphereVolume": s.VsphereVolume != nil,
		"quobyte": s.Quobyte != nil, "azureDisk": s.AzureDisk != nil, "photonPersistentDisk": s.PhotonPersistentDisk != nil,
		"projected": s.Projected != nil, "portworxVolume": s.PortworxVolume != nil, "scaleIO": s.ScaleIO != nil,
		"storageos": s.StorageOS != nil, "csi": s.CSI != nil, "ephemeral": s.Ephemeral != nil, "image": s.Image != nil,
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if set[k] {
			return k
		}
	}
	return ""
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// PodProfile is the profile of the stack's pods: a worker's (worker true) or any other's, with the
// site's priority classes and the stack's own Secret (the token's) and ConfigMap.
func (c *Config) PodProfile(worker bool) PodProfile {
	return PodProfile{
		Worker:          worker,
		PriorityClasses: slices.Clone(c.PriorityClasses),
		Secrets:         []string{c.HuggingFace.SecretName},
		ConfigMaps:      []string{c.ConfigMapName()},
	}
}

// priorityClasses refuses a role's priority class the site did not list, at the role's key.
func (c *Config) priorityClasses(v validator) {
	for i, pc := range c.PriorityClasses {
		v.dns1123Subdomain(fmt.Sprintf("priorityClasses[%d]", i), pc)
	}
	roles := map[string]Scheduling{"frontend.scheduling": c.Frontend.Scheduling, "modelDownload.scheduling": c.ModelDownload.Scheduling}
	if c.Profile == Aggregated || c.Profile == Disaggregated {
		for _, r := range c.Workers() {
			roles[r.Key+".scheduling"] = r.Config.Scheduling
		}
	}
	for _, key := range slices.Sorted(maps.Keys(roles)) {
		if pc := roles[key].PriorityClassName; pc != "" && !slices.Contains(c.PriorityClasses, pc) {
			v.add(key+".priorityClassName", "%q is not one of the site's priority classes (priorityClasses: %s): a class above other teams' pods preempts them", pc, listOrNone(c.PriorityClasses))
		}
	}
}
