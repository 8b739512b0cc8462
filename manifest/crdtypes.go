package manifest

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	eppv1alpha1 "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
)

// Typed subsets of the DynamoGraphDeployment (nvidia.com/v1beta1) and ComputeDomain
// (resource.nvidia.com/v1beta1) schemas: the fields this program sets, with the CRDs' json names.
// Pod templates are core/v1's own types.

// DynamoGraphDeploymentSpec is the spec of a DynamoGraphDeployment.
type DynamoGraphDeploymentSpec struct {
	BackendFramework string           `json:"backendFramework"`
	Restart          *GraphRestart    `json:"restart,omitempty"`
	Components       []GraphComponent `json:"components"`
}

// GraphRestart is spec.restart: a new ID makes the operator restart the graph's pods.
type GraphRestart struct {
	ID       string                `json:"id"`
	Strategy *GraphRestartStrategy `json:"strategy,omitempty"`
}

// GraphRestartStrategy orders a restart.
type GraphRestartStrategy struct {
	Type  string   `json:"type,omitempty"`
	Order []string `json:"order,omitempty"`
}

// GraphComponent is one service of the graph: the frontend or a worker role.
type GraphComponent struct {
	Name                   string          `json:"name"`
	Type                   string          `json:"type"`
	RuntimeVersionOverride string          `json:"runtimeVersionOverride,omitempty"`
	Replicas               int             `json:"replicas"`
	SharedMemorySize       string          `json:"sharedMemorySize,omitempty"`
	ScalingAdapter         *ScalingAdapter `json:"scalingAdapter,omitempty"`
	// EPPConfig is the endpoint picker's configuration (type epp only).
	EPPConfig *EPPConfig `json:"eppConfig,omitempty"`
	// FrontendSidecar names the container of the pod template the operator makes a frontend of
	// (port 8000, probes, Dynamo's environment): the endpoint picker's pool routes to it.
	FrontendSidecar *string                `json:"frontendSidecar,omitempty"`
	PodTemplate     corev1.PodTemplateSpec `json:"podTemplate"`
}

// EPPConfig is a component's eppConfig: the Gateway API Inference Extension's own
// EndpointPickerConfig, which the operator writes into the ConfigMap the picker reads.
type EPPConfig struct {
	Config *eppv1alpha1.EndpointPickerConfig `json:"config"`
}

// ScalingAdapter hands a component's replicas to the graph's scaling adapter. In v1beta1 it is a
// marker: present (an empty object) opts the component in; v1alpha1's `enabled` field is gone.
type ScalingAdapter struct{}

// ComputeDomainSpec is the spec of a ComputeDomain.
type ComputeDomainSpec struct {
	NumNodes int                  `json:"numNodes"`
	Channel  ComputeDomainChannel `json:"channel"`
}

// ComputeDomainChannel names the ResourceClaimTemplate the ComputeDomain controller generates.
type ComputeDomainChannel struct {
	ResourceClaimTemplate corev1.LocalObjectReference `json:"resourceClaimTemplate"`
}

// Untyped turns a typed spec into the plain JSON shape an object's fields are sent as. The empty
// `metadata: {}` and `resources: {}` that Go's JSON encoder writes for core/v1's struct fields are
// dropped: they are not in the recipe, and writing them into a live graph would be a spec change
// (a new generation, a restart of every worker).
func Untyped(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	dropEmptyStructs(m)
	return m, nil
}

func dropEmptyStructs(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			if obj, ok := child.(map[string]any); ok && len(obj) == 0 && (k == "metadata" || k == "resources") {
				delete(t, k)
				continue
			}
			if child == nil && k == "parameters" {
				// An endpoint picker plugin without parameters: the upstream type writes null.
				delete(t, k)
				continue
			}
			dropEmptyStructs(child)
		}
	case []any:
		for _, child := range t {
			dropEmptyStructs(child)
		}
	}
}
