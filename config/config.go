package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Namespace is the Pulumi config namespace of every key, as in `minimax-m3:profile`.
const Namespace = "minimax-m3"

// Profile selects the serving topology.
type Profile string

const (
	// Aggregated serving: a Frontend and TP workers that both prefill and decode, with CPU KV offload.
	Aggregated Profile = "agg"
	// Disaggregated serving: a Frontend, prefill workers and decode workers that move KV over NIXL.
	Disaggregated Profile = "disagg"
)

// Config is everything one stack deploys. The json names are the config keys (under `minimax-m3:`).
// The Hugging Face token is not part of it: see Raw.HFToken.
type Config struct {
	Profile Profile `json:"profile"`
	// GraphName names the DynamoGraphDeployment; the ConfigMap, ComputeDomain and Service derive from it.
	GraphName string `json:"graphName"`
	// GPUsPerNode is what one node offers a worker (GB200: 4 per compute tray).
	GPUsPerNode int `json:"gpusPerNode"`
	// Image is the Dynamo vLLM runtime image of every graph component.
	Image string `json:"image"`
	// RuntimeVersion is each component's runtimeVersionOverride.
	RuntimeVersion string `json:"runtimeVersion"`
	// ImagePullSecrets are added to every pod: the graph's and the download Job's.
	ImagePullSecrets []string `json:"imagePullSecrets"`
	// ImageRegistries are the registries (or repository prefixes under one) every image the stack
	// deploys must come from; default DefaultImageRegistries.
	ImageRegistries []string `json:"imageRegistries"`
	// PriorityClasses are the priority classes the site lets a stack's pods name (a role's
	// scheduling.priorityClassName); default none: a class above other teams' pods preempts them.
	PriorityClasses []string `json:"priorityClasses"`
	// Adopt lets the stack take over objects of the recipe that already exist in the cluster and
	// were not created by this stack (a deployment made with kustomize). Without it such an object is
	// an error that names it.
	Adopt bool `json:"adopt"`

	Namespace     NamespaceConfig     `json:"namespace"`
	HuggingFace   HuggingFaceConfig   `json:"huggingFace"`
	Model         ModelConfig         `json:"model"`
	Speculative   SpeculativeConfig   `json:"speculativeDecoding"`
	ModelCache    ModelCacheConfig    `json:"modelCache"`
	ModelDownload ModelDownloadConfig `json:"modelDownload"`
	ComputeDomain ComputeDomainConfig `json:"computeDomain"`
	Placement     PlacementConfig     `json:"placement"`
	ScaleOut      ScaleOutConfig      `json:"scaleOut"`
	Readiness     ReadinessConfig     `json:"readiness"`
	Restart       RestartConfig       `json:"restart"`
	Benchmark     BenchmarkConfig     `json:"benchmark"`
	SmokeTest     SmokeTestConfig     `json:"smokeTest"`
	Observability ObservabilityConfig `json:"observability"`
	Exposure      ExposureConfig      `json:"exposure"`
	NetworkPolicy NetworkPolicyConfig `json:"networkPolicy"`

	Frontend FrontendConfig `json:"frontend"`
	// Worker is the aggregated profile's worker; PrefillWorker and DecodeWorker the disaggregated ones.
	Worker        WorkerConfig `json:"worker"`
	PrefillWorker WorkerConfig `json:"prefillWorker"`
	DecodeWorker  WorkerConfig `json:"decodeWorker"`

	// Kubernetes selects the cluster.
	Kubernetes KubernetesConfig `json:"kubernetes"`
}

var runtimeVersionPattern = regexp.MustCompile(`^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$`)

// Validate checks a Config and returns every problem found, sorted by key.
func Validate(c *Config) Problems {
	var ps Problems
	v := validator{&ps}

	switch c.Profile {
	case Aggregated, Disaggregated:
	case "":
		v.add("profile", "is required: %q or %q", Aggregated, Disaggregated)
	default:
		v.choice("profile", reflect.TypeFor[Config](), "profile", string(c.Profile))
	}
	findPlaceholders(&ps, "", c)

	v.dns1035("graphName", c.FrontendServiceName(), "the frontend Service name %q derived from it")
	if c.Profile == Aggregated || c.Profile == Disaggregated {
		for _, r := range c.Workers() {
			v.dns1035("graphName", c.WorkerServiceName(r), "the "+r.Name+" Service name %q the Dynamo operator derives from it")
		}
	}
	if ns := c.DynamoNamespace(); c.Namespace.Name != "" && len(ns) > validation.LabelValueMaxLength {
		v.add("graphName", "with namespace.name %q, the Dynamo namespace %q the operator derives from both (a label value on every component) is %d characters, more than %d: shorten graphName or namespace.name",
			c.Namespace.Name, ns, len(ns), validation.LabelValueMaxLength)
	}
	v.atLeast("gpusPerNode", c.GPUsPerNode, 1)
	v.image("image", c.Image)
	if !runtimeVersionPattern.MatchString(c.RuntimeVersion) {
		v.add("runtimeVersion", "%q is not a version like 1.6.0", c.RuntimeVersion)
	}
	for i, s := range c.ImagePullSecrets {
		v.dns1123Subdomain(fmt.Sprintf("imagePullSecrets[%d]", i), s)
	}

	c.Namespace.validate(v, "namespace")
	v.dns1123Subdomain("huggingFace.secretName", c.HuggingFace.SecretName)
	c.Model.validate(v, "model")
	c.Speculative.validate(v, "speculativeDecoding")
	c.ModelCache.validate(v, "modelCache")
	c.ModelDownload.validate(v, "modelDownload")
	c.ComputeDomain.validate(v, "computeDomain")
	c.Placement.validate(v, "placement")
	c.ScaleOut.validate(v, "scaleOut", c)
	v.duration("readiness.timeout", c.Readiness.Timeout)
	if c.Readiness.ProgressDeadline != "0" {
		v.duration("readiness.progressDeadline", c.Readiness.ProgressDeadline)
	}
	v.duration("readiness.deleteTimeout", c.Readiness.DeleteTimeout)
	c.Restart.validate(v, "restart", c)
	c.SmokeTest.validate(v, "smokeTest", c)
	c.Benchmark.validate(v, "benchmark")
	c.Observability.validate(v, "observability", c)
	c.Exposure.validate(v, "exposure")
	for i, ns := range c.NetworkPolicy.AllowedNamespaces {
		v.dns1123Label(fmt.Sprintf("networkPolicy.allowedNamespaces[%d]", i), ns)
	}
	c.Frontend.validate(v, "frontend", c.PodProfile(false))
	c.priorityClasses(v)
	if c.Profile == Aggregated || c.Profile == Disaggregated {
		for _, r := range c.Workers() {
			r.Config.validate(v, r.Key, c, r)
		}
	}
	c.agree(v)
	c.imageRegistries(v)
	return ps.sorted()
}

// NetworkPolicyConfig isolates the graph's pods from the rest of the cluster with a NetworkPolicy
// (components.NetworkPolicySpec). On by default; it holds where the cluster's network plugin
// enforces NetworkPolicies.
type NetworkPolicyConfig struct {
	Enabled bool `json:"enabled"`
	// AllowedNamespaces may reach every port of the graph's pods: the Dynamo operator's and the
	// site's Prometheus's namespaces.
	AllowedNamespaces []string `json:"allowedNamespaces"`
}

// NetworkPolicyName is the graph's NetworkPolicy: <graphName>-isolation.
func (c *Config) NetworkPolicyName() string { return c.GraphName + "-isolation" }

// NamespaceConfig says where the stack deploys and whether it owns the namespace.
type NamespaceConfig struct {
	Name string `json:"name"`
	// Create makes the stack create the namespace; false uses an existing one, which the stack
	// never changes or deletes.
	Create bool `json:"create"`
	// PodSecurity is the Pod Security level a namespace the stack creates enforces: baseline (the
	// workers run by the RuntimeClass the API server exempts, and the site's admission policy
	// holds them to baseline with their one exemption), privileged, or "" to choose by the cluster:
	// baseline where the site's install is found (its pod policy names the workers' class),
	// privileged where it is not.
	PodSecurity string `json:"podSecurity"`
}

// The Pod Security levels a namespace the stack creates may enforce.
const (
	PodSecurityBaseline   = "baseline"
	PodSecurityPrivileged = "privileged"
)

// PodPolicyLabel on a namespace binds the site's admission policies to it
// (teamboundary.PodPolicyBinding): the site's team namespaces carry it, and so does every
// namespace a stack creates at baseline, where the workers' exempt RuntimeClass would otherwise
// escape Pod Security altogether.
const PodPolicyLabel = "minimax-m3.io/pod-policy"

// SitePodPolicy is the site's ValidatingAdmissionPolicy on pods (teamboundary.PodPolicy): where a
// stack finds it, the site is installed, and its annotation names the workers' class.
const SitePodPolicy = "minimax-m3-team-pods"

// WorkerRuntimeClassAnnotation, on the site's pod policy and on a team namespace, names the
// RuntimeClass the site exempts from Pod Security admission for the GPU workers: a stack gives it
// to workers whose runtimeClassName is not set, and to no other pod.
const WorkerRuntimeClassAnnotation = "minimax-m3.io/worker-runtime-class"

func (n NamespaceConfig) validate(v validator, key string) {
	v.choice(key+".podSecurity", reflect.TypeFor[NamespaceConfig](), "podSecurity", n.PodSecurity)
	if n.Name == "" {
		v.add(key+".name", "is required: pulumi config set --path %s <namespace>", Key(key+".name"))
		return
	}
	v.dns1123Label(key+".name", n.Name)
	if strings.HasPrefix(n.Name, "kube-") {
		v.add(key+".name", "%q is one of Kubernetes' own namespaces (kube-*), which hold the cluster's control plane and its credentials: choose a namespace of the stack's", n.Name)
	}
}

// HuggingFaceConfig names the Secret the download Job reads HF_TOKEN from.
type HuggingFaceConfig struct {
	SecretName string `json:"secretName"`
	// ExistingSecret uses a Secret the user brought (it must hold HF_TOKEN); the stack never changes
	// or deletes it. Otherwise the stack creates the Secret from the secret key `minimax-m3:hfToken`.
	ExistingSecret bool `json:"existingSecret"`
}

// ComputeDomainConfig is the NVLink channel every worker claims.
type ComputeDomainConfig struct {
	// Create makes one ComputeDomain per graph; false reuses ChannelClaimTemplate, an existing
	// ResourceClaimTemplate (a pre-provisioned channel).
	Create               bool   `json:"create"`
	Name                 string `json:"name"`
	ChannelClaimTemplate string `json:"channelClaimTemplate"`
}

func (d ComputeDomainConfig) validate(v validator, key string) {
	if d.Name != "" {
		v.dns1123Subdomain(key+".name", d.Name)
	}
	if !d.Create && d.ChannelClaimTemplate == "" {
		v.add(key+".channelClaimTemplate", "is required when computeDomain.create is false: name the existing channel ResourceClaimTemplate")
	}
	if d.ChannelClaimTemplate != "" {
		v.dns1123Subdomain(key+".channelClaimTemplate", d.ChannelClaimTemplate)
	}
}

// PlacementConfig keeps a graph's workers inside one NVLink domain that has room for all of them.
type PlacementConfig struct {
	// TopologyKey is the node label of the NVLink clique (the starter's placement Component;
	// GPU feature discovery's nvidia.com/gpu.clique). It makes a required pod affinity among the
	// graph's workers and, with Check, a required node affinity to one clique. Empty adds neither:
	// the workers may spread over the pool.
	TopologyKey string `json:"topologyKey"`
	// Clique pins the workers to this value of TopologyKey. Empty lets `preview` and `up` choose
	// (with Check): the clique the graph runs in, else the one that holds every worker most
	// tightly. Setting it to another clique moves a running graph (every worker restarts).
	Clique string `json:"clique"`
	// Check reads the pool's nodes and pods before anything is created or changed, and refuses a
	// graph no clique (or, without TopologyKey, the pool) has room for, with a table of cliques.
	Check bool `json:"check"`
	// DisruptionBudget adds a PodDisruptionBudget per worker role: a drain evicts at most one
	// worker of a role at a time.
	DisruptionBudget bool `json:"disruptionBudget"`
}

// DefaultTopologyKey is GPU feature discovery's node label of the NVLink clique; the
// disaggregated profile's default topologyKey (its workers move KV over MNNVL).
const DefaultTopologyKey = "nvidia.com/gpu.clique"

func (p PlacementConfig) validate(v validator, key string) {
	if p.TopologyKey != "" {
		v.qualifiedName(key+".topologyKey", p.TopologyKey)
	}
	if p.Clique != "" {
		if p.TopologyKey == "" {
			v.add(key+".clique", "needs placement.topologyKey, the label whose value it is")
		}
		v.errs(key+".clique", p.Clique, "label value", validation.IsValidLabelValue(p.Clique))
	}
}

// ReadinessConfig says whether `up` waits for the graph to report Ready.
type ReadinessConfig struct {
	WaitForReady bool   `json:"waitForReady"`
	Timeout      string `json:"timeout"`
	// ProgressDeadline ends `up` (and a benchmark's restart) when no pod of the graph has come
	// further (created, scheduled, every container started, Ready) for that long while a problem
	// of its pods persists (an image the registry times out on, an IMEX daemon never Ready, a probe
	// that never passes), naming the problem, like a Deployment's progressDeadlineSeconds. An engine
	// loading for hours with nothing wrong is not stuck. One at or past readiness.timeout never
	// ends the wait first; "0" turns it off.
	ProgressDeadline string `json:"progressDeadline"`
	// DeleteTimeout bounds how long `destroy` (or a replacement) waits for the graph to be gone:
	// the Dynamo operator must release its finalizer, and its components must be deleted first.
	DeleteTimeout string `json:"deleteTimeout"`
}

// ProgressDeadlineDuration is readiness.progressDeadline, 0 when it is not a duration.
func (r ReadinessConfig) ProgressDeadlineDuration() time.Duration {
	d, _ := time.ParseDuration(r.ProgressDeadline)
	return d
}

var restartIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:+-]{1,63}$`)

// RestartConfig is the graph's spec.restart: changing ID makes the Dynamo operator restart the
// graph's pods (a rolling restart, without any other change). Empty ID leaves spec.restart out, as
// a new graph must have it.
type RestartConfig struct {
	ID string `json:"id"`
	// Strategy is Sequential (the operator's default) or Parallel.
	Strategy string `json:"strategy"`
	// Order lists component names in the order a sequential restart takes them.
	Order []string `json:"order"`
}

func (r RestartConfig) validate(v validator, key string, c *Config) {
	if r.ID == "" {
		if r.Strategy != "" || len(r.Order) > 0 {
			v.add(key+".id", "is required when restart.strategy or restart.order is set")
		}
		return
	}
	if !restartIDPattern.MatchString(r.ID) {
		// `up` waits for the operator's status.restart.observedID to equal it, in the provider's
		// JSONPath syntax, where "=" separates the path from the value and quotes end a string.
		v.add(key+".id", "%q: use letters, digits and . _ : + - (at most 63; a date such as 2026-12-02T18:00 is fine)", r.ID)
	}
	v.choice(key+".strategy", reflect.TypeFor[RestartConfig](), "strategy", r.Strategy)
	if r.Strategy == "Parallel" && len(r.Order) > 0 {
		v.add(key+".order", "cannot be set with strategy Parallel: every component restarts at once")
	}
	names := []string{"Frontend"}
	for _, w := range c.Workers() {
		names = append(names, w.Name)
	}
	seen := map[string]bool{}
	for i, n := range r.Order {
		k := fmt.Sprintf("%s.order[%d]", key, i)
		if seen[n] {
			v.add(k, "%q is listed twice: the operator's webhook requires each component once", n)
		}
		seen[n] = true
		v.oneOf(k, n, names...)
	}
	// The operator's admission webhook (validation/dynamographdeployment.go) refuses an order that
	// leaves a component out.
	if len(r.Order) > 0 {
		var missing []string
		for _, n := range names {
			if !seen[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			v.add(key+".order", "must name every component or none (the operator's webhook refuses a partial order): %s missing", strings.Join(missing, ", "))
		}
	}
}

// KubernetesConfig selects the cluster.
type KubernetesConfig struct {
	// Context is a kubeconfig context; empty uses the current one.
	Context string `json:"context"`
	// ClusterIdentifier names the cluster for the Kubernetes provider. The provider replaces every
	// resource when it believes the cluster changed; with a fixed identifier, a change of context
	// or kubeconfig for the same cluster is an update of the provider only.
	ClusterIdentifier string `json:"clusterIdentifier"`
	// RequireRead refuses to run when the cluster cannot be read: the ownership check (nothing
	// another stack, team or tool manages is taken over) and the placement check then cannot be
	// skipped with a warning. The portal sets it for every stack it runs.
	RequireRead bool `json:"requireRead"`
}

// Workers returns the worker roles of the profile, in the graph's component order.
func (c *Config) Workers() []Role {
	if c.Profile == Disaggregated {
		return []Role{
			{Name: "PrefillWorker", Type: "prefill", Key: "prefillWorker", Config: &c.PrefillWorker},
			{Name: "DecodeWorker", Type: "decode", Key: "decodeWorker", Config: &c.DecodeWorker},
		}
	}
	return []Role{{Name: "Worker", Type: "worker", Key: "worker", Config: &c.Worker}}
}

// Role is one worker component of the graph.
type Role struct {
	// Name is the graph component name, Type its Dynamo component type, Key its config key.
	Name, Type, Key string
	Config          *WorkerConfig
}

// GPUs is the number of GPUs the graph's workers request.
func (c *Config) GPUs() int {
	n := 0
	for _, r := range c.Workers() {
		n += r.Config.Replicas * r.Config.TensorParallelSize
	}
	return n
}

// ConfigMapName, ComputeDomainName, ChannelClaimTemplateName and FrontendServiceName derive the
// recipe's object names from the graph name.
func (c *Config) ConfigMapName() string { return c.GraphName + "-config" }

func (c *Config) ComputeDomainName() string {
	if c.ComputeDomain.Name != "" {
		return c.ComputeDomain.Name
	}
	return c.GraphName + "-cd"
}

func (c *Config) ChannelClaimTemplateName() string {
	if c.ComputeDomain.ChannelClaimTemplate != "" {
		return c.ComputeDomain.ChannelClaimTemplate
	}
	return c.ComputeDomainName() + "-channel"
}

// workerHashLength is the length of the worker hash the Dynamo operator appends to a worker
// component's resource names (the DynamoComponentDeployment, its Deployment and Service): 8 hex
// digits.
const workerHashLength = 8

// WorkerServiceName is the longest name the Dynamo operator gives a worker component's resources:
// `<graph>-<component, lower case>-<worker hash>`, with a placeholder for the hash.
func (c *Config) WorkerServiceName(r Role) string {
	return c.GraphName + "-" + strings.ToLower(r.Name) + "-" + strings.Repeat("0", workerHashLength)
}

// DynamoNamespace is the Dynamo namespace the operator gives the graph's components:
// `<namespace>-<graph>` with dots made dashes. It is the value of a label on each of them.
func (c *Config) DynamoNamespace() string {
	return c.Namespace.Name + "-" + strings.ReplaceAll(c.GraphName, ".", "-")
}

// FrontendServiceName is the Service the Dynamo operator creates for the frontend.
func (c *Config) FrontendServiceName() string { return c.GraphName + "-frontend" }

// FrontendPort is the port of the frontend Service. The Dynamo operator creates the Service on this
// port whatever the frontend listens on, so it is not a setting.
const FrontendPort = 8000

// ServedModelName is the name clients request: model.servedModelName, or model.name when unset.
func (c *Config) ServedModelName() string {
	if c.Model.ServedModelName != "" {
		return c.Model.ServedModelName
	}
	return c.Model.Name
}

// SpeculativeConfigKey is the ConfigMap key the workers read.
func (c *Config) SpeculativeConfigKey() string {
	if c.Speculative.Mode == SpeculativeSynthetic {
		return "speculative-config-synthetic"
	}
	return "speculative-config"
}
