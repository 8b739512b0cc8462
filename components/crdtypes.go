package components

import "encoding/json"

// Typed subsets of the DynamoGraphDeployment (nvidia.com/v1beta1) and ComputeDomain
// (resource.nvidia.com/v1beta1) schemas: the fields this program sets, with the CRDs' json names.
// Pod template fields follow core/v1.

// DynamoGraphDeploymentSpec is the spec of a DynamoGraphDeployment.
type DynamoGraphDeploymentSpec struct {
	BackendFramework string           `json:"backendFramework"`
	Components       []GraphComponent `json:"components"`
}

// GraphComponent is one service of the graph: the frontend or a worker role.
type GraphComponent struct {
	Name                   string      `json:"name"`
	Type                   string      `json:"type"`
	RuntimeVersionOverride string      `json:"runtimeVersionOverride,omitempty"`
	Replicas               int         `json:"replicas"`
	SharedMemorySize       string      `json:"sharedMemorySize,omitempty"`
	PodTemplate            PodTemplate `json:"podTemplate"`
}

// ComputeDomainSpec is the spec of a ComputeDomain.
type ComputeDomainSpec struct {
	NumNodes int                  `json:"numNodes"`
	Channel  ComputeDomainChannel `json:"channel"`
}

// ComputeDomainChannel names the ResourceClaimTemplate the ComputeDomain controller generates.
type ComputeDomainChannel struct {
	ResourceClaimTemplate NamedObject `json:"resourceClaimTemplate"`
}

// NamedObject is a reference by name (also core/v1 LocalObjectReference).
type NamedObject struct {
	Name string `json:"name"`
}

// PodTemplate is core/v1 PodTemplateSpec.
type PodTemplate struct {
	Metadata *PodMetadata `json:"metadata,omitempty"`
	Spec     PodSpec      `json:"spec"`
}

// PodMetadata is the part of ObjectMeta a pod template carries.
type PodMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PodSpec is core/v1 PodSpec, restricted to what the program sets.
type PodSpec struct {
	RestartPolicy                 string             `json:"restartPolicy,omitempty"`
	ImagePullSecrets              []NamedObject      `json:"imagePullSecrets,omitempty"`
	NodeSelector                  map[string]string  `json:"nodeSelector,omitempty"`
	Tolerations                   []Toleration       `json:"tolerations,omitempty"`
	Affinity                      *Affinity          `json:"affinity,omitempty"`
	SchedulerName                 string             `json:"schedulerName,omitempty"`
	RuntimeClassName              string             `json:"runtimeClassName,omitempty"`
	PriorityClassName             string             `json:"priorityClassName,omitempty"`
	ResourceClaims                []PodResourceClaim `json:"resourceClaims,omitempty"`
	TerminationGracePeriodSeconds *int64             `json:"terminationGracePeriodSeconds,omitempty"`
	Containers                    []Container        `json:"containers"`
	Volumes                       []Volume           `json:"volumes,omitempty"`
}

// Toleration is core/v1 Toleration.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"`
}

// Affinity is core/v1 Affinity.
type Affinity struct {
	NodeAffinity *NodeAffinity `json:"nodeAffinity,omitempty"`
	PodAffinity  *PodAffinity  `json:"podAffinity,omitempty"`
}

// NodeAffinity holds required node selector terms.
type NodeAffinity struct {
	Required *NodeSelector `json:"requiredDuringSchedulingIgnoredDuringExecution,omitempty"`
}

// NodeSelector is core/v1 NodeSelector.
type NodeSelector struct {
	Terms []NodeSelectorTerm `json:"nodeSelectorTerms"`
}

// NodeSelectorTerm is core/v1 NodeSelectorTerm.
type NodeSelectorTerm struct {
	MatchExpressions []Requirement `json:"matchExpressions"`
}

// Requirement is a label selector or node selector requirement.
type Requirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// PodAffinity holds required pod affinity terms.
type PodAffinity struct {
	Required []PodAffinityTerm `json:"requiredDuringSchedulingIgnoredDuringExecution,omitempty"`
}

// PodAffinityTerm is core/v1 PodAffinityTerm.
type PodAffinityTerm struct {
	TopologyKey    string         `json:"topologyKey"`
	MatchLabelKeys []string       `json:"matchLabelKeys,omitempty"`
	LabelSelector  *LabelSelector `json:"labelSelector,omitempty"`
}

// LabelSelector is meta/v1 LabelSelector.
type LabelSelector struct {
	MatchExpressions []Requirement `json:"matchExpressions,omitempty"`
}

// PodResourceClaim is core/v1 PodResourceClaim.
type PodResourceClaim struct {
	Name                      string `json:"name"`
	ResourceClaimTemplateName string `json:"resourceClaimTemplateName,omitempty"`
}

// Container is core/v1 Container, restricted to what the program sets.
type Container struct {
	Name            string           `json:"name"`
	Image           string           `json:"image"`
	ImagePullPolicy string           `json:"imagePullPolicy,omitempty"`
	Command         []string         `json:"command,omitempty"`
	Args            []string         `json:"args,omitempty"`
	SecurityContext *SecurityContext `json:"securityContext,omitempty"`
	EnvFrom         []EnvFromSource  `json:"envFrom,omitempty"`
	Env             []EnvVar         `json:"env,omitempty"`
	Resources       *Resources       `json:"resources,omitempty"`
	VolumeMounts    []VolumeMount    `json:"volumeMounts,omitempty"`
	StartupProbe    *Probe           `json:"startupProbe,omitempty"`
}

// SecurityContext is core/v1 SecurityContext.
type SecurityContext struct {
	RunAsUser                *int64          `json:"runAsUser,omitempty"`
	RunAsGroup               *int64          `json:"runAsGroup,omitempty"`
	AllowPrivilegeEscalation *bool           `json:"allowPrivilegeEscalation,omitempty"`
	Capabilities             *Capabilities   `json:"capabilities,omitempty"`
	SeccompProfile           *SeccompProfile `json:"seccompProfile,omitempty"`
}

// Capabilities is core/v1 Capabilities.
type Capabilities struct {
	Add  []string `json:"add,omitempty"`
	Drop []string `json:"drop,omitempty"`
}

// SeccompProfile is core/v1 SeccompProfile.
type SeccompProfile struct {
	Type string `json:"type"`
}

// EnvFromSource is core/v1 EnvFromSource with a Secret.
type EnvFromSource struct {
	SecretRef *NamedObject `json:"secretRef,omitempty"`
}

// EnvVar is core/v1 EnvVar.
type EnvVar struct {
	Name      string        `json:"name"`
	Value     string        `json:"value,omitempty"`
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource reads a variable from a ConfigMap key.
type EnvVarSource struct {
	ConfigMapKeyRef *KeySelector `json:"configMapKeyRef,omitempty"`
}

// KeySelector selects a key of a ConfigMap.
type KeySelector struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Resources is core/v1 ResourceRequirements.
type Resources struct {
	Claims   []NamedObject     `json:"claims,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
	Limits   map[string]string `json:"limits,omitempty"`
}

// VolumeMount is core/v1 VolumeMount.
type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
}

// Volume is core/v1 Volume backed by a PVC.
type Volume struct {
	Name                  string                 `json:"name"`
	PersistentVolumeClaim *PersistentVolumeClaim `json:"persistentVolumeClaim,omitempty"`
}

// PersistentVolumeClaim is core/v1 PersistentVolumeClaimVolumeSource.
type PersistentVolumeClaim struct {
	ClaimName string `json:"claimName"`
}

// Probe is core/v1 Probe with an HTTP GET.
type Probe struct {
	HTTPGet          *HTTPGetAction `json:"httpGet,omitempty"`
	PeriodSeconds    int            `json:"periodSeconds,omitempty"`
	FailureThreshold int            `json:"failureThreshold,omitempty"`
}

// HTTPGetAction is core/v1 HTTPGetAction with a named port.
type HTTPGetAction struct {
	Path string `json:"path"`
	Port string `json:"port"`
}

// untyped turns a typed spec into the plain JSON shape a CustomResource's OtherFields carries.
func untyped(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}
