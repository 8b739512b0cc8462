package manifest

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"minimax-m3/config"
)

// The labels the Dynamo operator puts on every pod of a graph component (its consts.go), which the
// PodMonitors, the disruption budgets and placement select by: the graph's name, the component's
// name and type, and metrics-enabled, which it leaves off a pod whose component opted out
// (annotation nvidia.com/enable-metrics: "false").
const (
	GraphNameLabel      = "nvidia.com/dynamo-graph-deployment-name"
	ComponentLabel      = "nvidia.com/dynamo-component"
	ComponentTypeLabel  = "nvidia.com/dynamo-component-type"
	MetricsEnabledLabel = "nvidia.com/metrics-enabled"
)

// PartOf is the app.kubernetes.io/part-of label of every object the stack and its benchmark create.
const PartOf = "minimax-m3"

// Labels every object a stack creates carries, so `kubectl get -l app.kubernetes.io/instance=<stack>`
// tells stacks apart in a shared namespace, and the ownership check knows what a stack created.
const (
	InstanceLabel  = "app.kubernetes.io/instance"
	ManagedByLabel = "app.kubernetes.io/managed-by"
	PartOfLabel    = "app.kubernetes.io/part-of"
	ManagedBy      = "pulumi"
)

// Annotations that identify a stack's objects and what it adopted.
const (
	// StackAnnotation holds the stack's identity (organization/project/stack): unlike the instance
	// label, it tells two `agg` stacks of different projects or organizations apart.
	StackAnnotation = "minimax-m3.io/stack"
	// AdoptedAnnotation marks an object the stack took over with adopt=true: it existed before the
	// stack, so destroy leaves it where that matters (a namespace, a cache claim).
	AdoptedAnnotation = "minimax-m3.io/adopted"
)

// PlacementAnnotation on the graph records the clique its workers were placed in
// (<topologyKey>=<clique>): the next `up` keeps the graph there.
const PlacementAnnotation = "minimax-m3.io/placement"

// The resources of other projects the stack creates, by the switch that adds them.
var (
	// PodMonitors and PrometheusRules are prometheus-operator's (observability).
	PodMonitors     = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "podmonitors"}
	PrometheusRules = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}
	// HTTPRoutes are Gateway API's routes (exposure).
	HTTPRoutes = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
	// InferencePools are the Gateway API Inference Extension's pools, one of which the Dynamo
	// operator makes for the graph's endpoint picker (exposure.backend inferencePool).
	InferencePools = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
	// DisruptionBudgets are a worker role's (placement.disruptionBudget).
	DisruptionBudgets = schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}
	// NetworkPolicies are the graph's (networkPolicy.enabled).
	NetworkPolicies = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
)

// DisruptionBudgetName is the PodDisruptionBudget of a worker role: <graphName>-<role>.
func DisruptionBudgetName(c *config.Config, r config.Role) string {
	return c.GraphName + "-" + strings.ToLower(r.Name)
}
