// Package config holds the typed configuration of a minimax-m3 stack: the recipe's portable values as
// defaults per profile, the site values a platform engineer adds with `pulumi config set`, and the
// validation that rejects bad input before any resource is touched.
//
// It is pure Go: no Pulumi resources and no Outputs, so it is tested with plain Go tests.
package config

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

	Namespace     NamespaceConfig     `json:"namespace"`
	HuggingFace   HuggingFaceConfig   `json:"huggingFace"`
	Model         ModelConfig         `json:"model"`
	Speculative   SpeculativeConfig   `json:"speculativeDecoding"`
	ModelCache    ModelCacheConfig    `json:"modelCache"`
	ModelDownload ModelDownloadConfig `json:"modelDownload"`
	ComputeDomain ComputeDomainConfig `json:"computeDomain"`
	Placement     PlacementConfig     `json:"placement"`
	Readiness     ReadinessConfig     `json:"readiness"`

	Frontend FrontendConfig `json:"frontend"`
	// Worker is the aggregated profile's worker; PrefillWorker and DecodeWorker the disaggregated ones.
	Worker        WorkerConfig `json:"worker"`
	PrefillWorker WorkerConfig `json:"prefillWorker"`
	DecodeWorker  WorkerConfig `json:"decodeWorker"`

	// Kubernetes selects the cluster; Render writes manifests instead of applying them.
	Kubernetes KubernetesConfig `json:"kubernetes"`

	// HFToken is the Hugging Face token from the secret key `minimax-m3:hfToken`. It is never
	// serialised back: the program hands it to Pulumi only as a secret Output.
	HFToken string `json:"-"`
}

// NamespaceConfig says where the stack deploys and whether it owns the namespace.
type NamespaceConfig struct {
	Name string `json:"name"`
	// Create makes the stack create the namespace; false adopts an existing one, which the stack
	// never changes or deletes.
	Create bool `json:"create"`
}

// HuggingFaceConfig names the Secret the download Job reads HF_TOKEN from.
type HuggingFaceConfig struct {
	SecretName string `json:"secretName"`
	// ExistingSecret uses a Secret the user brought (it must hold HF_TOKEN); the stack never changes
	// or deletes it. Otherwise the stack creates the Secret from the secret key `minimax-m3:hfToken`.
	ExistingSecret bool `json:"existingSecret"`
}

// ModelConfig pins the served model and its EAGLE3 draft.
type ModelConfig struct {
	Name            string      `json:"name"`
	Revision        string      `json:"revision"`
	ServedModelName string      `json:"servedModelName"`
	Draft           DraftConfig `json:"draft"`
}

// DraftConfig pins the EAGLE3 draft model used for speculative decoding.
type DraftConfig struct {
	Name     string `json:"name"`
	Revision string `json:"revision"`
}

// SpeculativeMode selects real EAGLE3 verification or the benchmark-only synthetic acceptance.
type SpeculativeMode string

const (
	SpeculativeReal      SpeculativeMode = "real"
	SpeculativeSynthetic SpeculativeMode = "synthetic"
)

// SpeculativeConfig is the vLLM speculative-config both ConfigMap keys are built from.
type SpeculativeConfig struct {
	Method               string `json:"method"`
	NumSpeculativeTokens int    `json:"numSpeculativeTokens"`
	AttentionBackend     string `json:"attentionBackend"`
	UseLocalArgmax       bool   `json:"useLocalArgmaxReduction"`
	// Mode picks which ConfigMap key the workers read. Synthetic bypasses verification: benchmarks only.
	Mode SpeculativeMode `json:"mode"`
	// SyntheticAcceptanceLength is the mean accepted length simulated in synthetic mode.
	SyntheticAcceptanceLength float64 `json:"syntheticAcceptanceLength"`
}

// ModelCacheConfig is the PVC the model is downloaded to and served from.
type ModelCacheConfig struct {
	ClaimName string `json:"claimName"`
	// Create makes the stack create the claim; false uses an existing, populated one.
	Create       bool   `json:"create"`
	StorageClass string `json:"storageClass"`
	Size         string `json:"size"`
	AccessMode   string `json:"accessMode"`
	MountPath    string `json:"mountPath"`
	// DeleteOnDestroy lets `pulumi destroy` delete a claim the stack created. Off by default: the
	// cache is hours of download.
	DeleteOnDestroy bool `json:"deleteOnDestroy"`
}

// ModelDownloadConfig is the Job that fills the cache with the pinned model and draft.
type ModelDownloadConfig struct {
	Enabled bool   `json:"enabled"`
	JobName string `json:"jobName"`
	Image   string `json:"image"`
	// HubClientVersion pins the huggingface_hub release the Job installs.
	HubClientVersion string `json:"hubClientVersion"`
	// Timeout bounds the download (Go duration). It becomes the Job's activeDeadlineSeconds, so
	// Kubernetes fails the Job itself and `up` reports DeadlineExceeded at once.
	Timeout      string `json:"timeout"`
	BackoffLimit int    `json:"backoffLimit"`
	// WaitForCompletion makes `up` wait for the download before creating the graph. Turn it off
	// only where no Job can run (a local API server without nodes) or a GitOps tool owns rollout.
	WaitForCompletion bool `json:"waitForCompletion"`
	// Resources of the download container; empty leaves them to the namespace defaults.
	Resources  Resources  `json:"resources"`
	Scheduling Scheduling `json:"scheduling"`
}

// ComputeDomainConfig is the NVLink channel every worker claims.
type ComputeDomainConfig struct {
	// Create makes one ComputeDomain per graph; false reuses ChannelClaimTemplate, an existing
	// ResourceClaimTemplate (a pre-provisioned channel).
	Create               bool   `json:"create"`
	Name                 string `json:"name"`
	ChannelClaimTemplate string `json:"channelClaimTemplate"`
}

// PlacementConfig keeps a graph's workers inside one NVLink domain.
type PlacementConfig struct {
	// TopologyKey is the node label of the NVLink clique (the starter's placement Component).
	// Empty adds no pod affinity.
	TopologyKey string `json:"topologyKey"`
}

// ReadinessConfig says whether `up` waits for the graph to report Ready.
type ReadinessConfig struct {
	WaitForReady bool   `json:"waitForReady"`
	Timeout      string `json:"timeout"`
}

// KubernetesConfig selects the cluster, or rendering to a directory instead.
type KubernetesConfig struct {
	// Context is a kubeconfig context; empty uses the current one.
	Context string `json:"context"`
	// RenderDirectory, when set, writes every object as YAML there and touches no cluster.
	RenderDirectory string `json:"renderDirectory"`
}

// Resources are container requests and limits as Kubernetes quantities.
type Resources struct {
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
}

// EnvVar is a literal container environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Toleration lets a role's pods onto tainted nodes.
type Toleration struct {
	Key      string `json:"key"`
	Operator string `json:"operator"`
	Value    string `json:"value"`
	Effect   string `json:"effect"`
}

// Scheduling is the starter's scheduling Component for one role.
type Scheduling struct {
	NodeSelector map[string]string `json:"nodeSelector"`
	Tolerations  []Toleration      `json:"tolerations"`
	// RequiredNodeLabels becomes a required node affinity: the node's label must be one of the values.
	RequiredNodeLabels map[string][]string `json:"requiredNodeLabels"`
	SchedulerName      string              `json:"schedulerName"`
	RuntimeClassName   string              `json:"runtimeClassName"`
	PriorityClassName  string              `json:"priorityClassName"`
}

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

// StartupProbe is the starter's probes Component: a cluster-wide worker startup allowance.
type StartupProbe struct {
	// FailureThreshold × 10 s is the allowance; 0 keeps the operator's default probe.
	FailureThreshold int `json:"failureThreshold"`
}

// FrontendConfig is the OpenAI-compatible HTTP frontend and KV-aware router.
type FrontendConfig struct {
	Replicas   int          `json:"replicas"`
	Resources  Resources    `json:"resources"`
	Scheduling Scheduling   `json:"scheduling"`
	Router     RouterConfig `json:"router"`
	HTTPPort   int          `json:"httpPort"`
	// ModelName and TrustRemoteCode are passed when the frontend must load the tokenizer itself.
	ModelName       string            `json:"modelName"`
	TrustRemoteCode bool              `json:"trustRemoteCode"`
	Env             []EnvVar          `json:"env"`
	ExtraArgs       []string          `json:"extraArgs"`
	ExtraEnv        []EnvVar          `json:"extraEnv"`
	PodAnnotations  map[string]string `json:"podAnnotations"`
}

// RouterConfig holds the frontend's router flags.
type RouterConfig struct {
	Mode              string `json:"mode"`
	KVEvents          bool   `json:"kvEvents"`
	TrackActiveBlocks bool   `json:"trackActiveBlocks"`
	TrackOutputBlocks bool   `json:"trackOutputBlocks"`
	KVCacheBlockSize  int    `json:"kvCacheBlockSize"`
}

// WorkerConfig is one vLLM worker role.
type WorkerConfig struct {
	Replicas           int       `json:"replicas"`
	TensorParallelSize int       `json:"tensorParallelSize"`
	SharedMemorySize   string    `json:"sharedMemorySize"`
	Resources          Resources `json:"resources"`
	// TerminationGracePeriodSeconds lets a worker drain; 0 keeps the Kubernetes default.
	TerminationGracePeriodSeconds int               `json:"terminationGracePeriodSeconds"`
	PodAnnotations                map[string]string `json:"podAnnotations"`
	Scheduling                    Scheduling        `json:"scheduling"`
	Network                       Network           `json:"network"`
	StartupProbe                  StartupProbe      `json:"startupProbe"`
	VLLM                          VLLMConfig        `json:"vllm"`
	// Env is the recipe's tuning environment, in order; ExtraEnv is appended after the site's network
	// variables. A name may appear only once across all of them.
	Env       []EnvVar `json:"env"`
	ExtraArgs []string `json:"extraArgs"`
	ExtraEnv  []EnvVar `json:"extraEnv"`
}

// VLLMConfig holds the flags `dynamo.vllm` is started with.
type VLLMConfig struct {
	// RouterMode and RouterTrackOutputBlocks configure a prefill worker's own router.
	RouterMode              string  `json:"routerMode"`
	RouterTrackOutputBlocks *bool   `json:"routerTrackOutputBlocks"`
	TrustRemoteCode         bool    `json:"trustRemoteCode"`
	BlockSize               int     `json:"blockSize"`
	GPUMemoryUtilization    float64 `json:"gpuMemoryUtilization"`
	MaxModelLen             int     `json:"maxModelLen"`
	MaxNumSeqs              int     `json:"maxNumSeqs"`
	MaxNumBatchedTokens     int     `json:"maxNumBatchedTokens"`
	EnablePrefixCaching     bool    `json:"enablePrefixCaching"`
	KVCacheMetrics          bool    `json:"kvCacheMetrics"`
	KVCacheDtype            string  `json:"kvCacheDtype"`
	// EnableMultimodal with FrontendDecoding lets the frontend decode images and pass embeddings.
	EnableMultimodal     bool   `json:"enableMultimodal"`
	FrontendDecoding     bool   `json:"frontendDecoding"`
	MMEncoderTPMode      string `json:"mmEncoderTpMode"`
	SkipMMProfiling      bool   `json:"skipMmProfiling"`
	EnableCumemAllocator bool   `json:"enableCumemAllocator"`
	// FlashinferAutotune false passes --no-enable-flashinfer-autotune.
	FlashinferAutotune *bool `json:"flashinferAutotune"`
	BF16x3RouterGemm   bool  `json:"bf16x3RouterGemm"`
	// AttentionConfig, CompilationConfig and KVEventsConfig are JSON objects, passed verbatim.
	AttentionConfig    string     `json:"attentionConfig"`
	CompilationConfig  string     `json:"compilationConfig"`
	KVEventsConfig     string     `json:"kvEventsConfig"`
	ToolCallParser     string     `json:"toolCallParser"`
	DynReasoningParser string     `json:"dynReasoningParser"`
	ReasoningParser    string     `json:"reasoningParser"`
	KVTransfer         KVTransfer `json:"kvTransfer"`
}

// KVTransfer is vLLM's kv-transfer-config: CPU offload for aggregated serving, NIXL between prefill
// and decode for disaggregated serving.
type KVTransfer struct {
	Connector         string      `json:"connector"`
	Role              string      `json:"role"`
	LoadFailurePolicy string      `json:"loadFailurePolicy"`
	CPUOffload        *CPUOffload `json:"cpuOffload"`
}

// CPUOffload is the OffloadingConnector's CPUOffloadingSpec.
type CPUOffload struct {
	SpecName               string `json:"specName"`
	CPUBytesToUse          int64  `json:"cpuBytesToUse"`
	BlockSize              int    `json:"blockSize"`
	StoreThreshold         int    `json:"storeThreshold"`
	SelfDescribingKVEvents bool   `json:"selfDescribingKvEvents"`
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

func (c *Config) FrontendServiceName() string { return c.GraphName + "-frontend" }

// SpeculativeConfigKey is the ConfigMap key the workers read.
func (c *Config) SpeculativeConfigKey() string {
	if c.Speculative.Mode == SpeculativeSynthetic {
		return "speculative-config-synthetic"
	}
	return "speculative-config"
}
