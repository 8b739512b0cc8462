package config

import "slices"

// The recipe's portable values, in one place: the stack files, Pulumi.yaml and the components
// restate none of them. A stack that sets only `profile` (and its site values) deploys the upstream
// MiniMax M3 GB200 recipe object for object.

const (
	defaultImage          = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.0-minimax-m3-dev.1"
	defaultRuntimeVersion = "1.6.0"
	modelName             = "nvidia/MiniMax-M3-NVFP4"
	modelRevision         = "901464083161bf8612a29ff7ad29914cd4ab4a85"
	draftName             = "Inferact/MiniMax-M3-EAGLE3-GQA"
	draftRevision         = "96692486b5fd38ebf8fd2a5f6bb53427d30819a8"

	attentionConfig = `{"backend":"FLASHINFER","use_trtllm_attention":true,"indexer_kv_dtype":"fp8","minimax_m3_msa_decode_backend":"cutlass"}`
	kvEventsConfig  = `{"enable_kv_cache_events":true,"publisher":"zmq"}`
	// CUDA graph capture sizes up to the batch a role runs: 8192 tokens for decode-heavy roles,
	// 16384 for prefill.
	compilationConfig8K  = `{"cudagraph_mode":"FULL_AND_PIECEWISE","max_cudagraph_capture_size":8192,"cudagraph_capture_sizes":[1,2,4,8,12,16,20,24,32,48,64,96,128,192,256,512,1024,1536,2048,2560,3072,4096,6144,8192]}`
	compilationConfig16K = `{"cudagraph_mode":"FULL_AND_PIECEWISE","max_cudagraph_capture_size":16384,"cudagraph_capture_sizes":[1,2,4,8,12,16,20,24,32,48,64,96,128,192,256,512,1024,1536,2048,2560,3072,4096,6144,8192,12288,14336,16384]}`
)

// Defaults returns the recipe's configuration for a profile. An unknown profile gets the
// aggregated defaults; Validate reports it.
func Defaults(p Profile) Config {
	c := Config{
		Profile:         p,
		GraphName:       "minimax-m3-" + string(p) + "-gb200-agentic",
		GPUsPerNode:     4,
		Image:           defaultImage,
		ImageRegistries: slices.Clone(DefaultImageRegistries),
		RuntimeVersion:  defaultRuntimeVersion,
		Namespace:       NamespaceConfig{Create: true},
		HuggingFace:     HuggingFaceConfig{SecretName: "hf-token-secret"},
		Model: ModelConfig{
			Name:     modelName,
			Revision: modelRevision,
			Draft:    DraftConfig{Name: draftName, Revision: draftRevision},
		},
		Speculative: SpeculativeConfig{
			Method:                    "eagle3",
			NumSpeculativeTokens:      3,
			AttentionBackend:          "FLASH_ATTN",
			UseLocalArgmax:            true,
			Mode:                      SpeculativeReal,
			SyntheticAcceptanceLength: 2.89,
		},
		ModelCache: ModelCacheConfig{
			ClaimName:  "shared-model-cache",
			Create:     true,
			Size:       "1000Gi",
			AccessMode: "ReadWriteMany",
			MountPath:  "/shared-model-cache",
		},
		ModelDownload: ModelDownloadConfig{
			Enabled:           true,
			JobName:           "minimax-m3-model-download",
			Image:             "python:3.10-slim",
			HubClientVersion:  "1.16.4",
			Timeout:           "4h",
			BackoffLimit:      3,
			WaitForCompletion: true,
		},
		ComputeDomain: ComputeDomainConfig{Create: true},
		Placement:     PlacementConfig{Check: true, DisruptionBudget: true},
		ScaleOut:      ScaleOutConfig{Graphs: 1, Drain: "5m"},
		Readiness:     ReadinessConfig{WaitForReady: true, Timeout: "2h", DeleteTimeout: "10m", ProgressDeadline: "10m"},
		// The recipe's benchmark (perf/perf.yaml and perf/README.md): its AIPerf image, trace and caps.
		Benchmark: BenchmarkConfig{
			Image:             "nvcr.io/nvidia/ai-dynamo/aiperf:0.12.0",
			HelperImage:       "busybox:1.36",
			TraceFile:         "traces/64k_400_90kv_agent_new_noschedule_short_15perc.jsonl",
			TraceSHA256:       "f20d3f2bc83dd1306cda659fbe34e7c4d85ca5497626c98bc0b1c4d2211379d0",
			MaxISL:            1000000,
			CapOSL:            12000,
			RequestTimeout:    7200,
			Timeout:           "3h",
			ArtifactDirectory: "aiperf-artifacts",
			Tolerations:       []Toleration{{Key: "kubernetes.io/arch", Operator: "Equal", Value: "arm64", Effect: "NoSchedule"}},
		},
		// The recipe's smoke test, as a Job: the frontend lists the model and completes a chat.
		SmokeTest: SmokeTestConfig{Enabled: true, Timeout: "10m", Message: "Respond with a short readiness message.", MaxTokens: 64},
		// Off until a site turns it on; once on, what kube-prometheus-stack expects.
		Observability: ObservabilityConfig{
			ScrapeInterval:     "15s",
			DRADriverNamespace: "nvidia-dra-driver-gpu",
			Alerts:             AlertsConfig{For: "5m", ErrorRatio: 0.05, QueuedRequests: 64, KVCacheUsage: 0.95},
			Dashboard:          DashboardConfig{Enabled: true, Labels: map[string]string{"grafana_dashboard": "1"}},
		},
		// The graph's pods isolated from other teams': the Dynamo operator's namespace and a
		// kube-prometheus-stack's reach them.
		NetworkPolicy: NetworkPolicyConfig{Enabled: true, AllowedNamespaces: []string{"dynamo-system", "monitoring"}},
		Exposure: ExposureConfig{
			PathPrefix: "/", Scheme: "https", RequestTimeout: "2h", Backend: BackendFrontend,
			EndpointPicker: EndpointPickerConfig{Resources: Resources{
				Requests: map[string]string{"cpu": "1", "memory": "2Gi"},
				Limits:   map[string]string{"cpu": "4", "memory": "8Gi"},
			}},
			FrontendSidecar: FrontendSidecarConfig{Resources: Resources{
				Requests: map[string]string{"cpu": "1", "memory": "4Gi"},
				Limits:   map[string]string{"cpu": "4", "memory": "16Gi"},
			}},
		},
		// A fixed identifier: a new kubeconfig context for the same cluster updates the provider
		// instead of replacing every resource. Change it only to move the stack to another cluster.
		Kubernetes: KubernetesConfig{ClusterIdentifier: "default"},
		Frontend: FrontendConfig{
			Replicas: 1,
			Resources: Resources{
				Requests: map[string]string{"cpu": "2", "memory": "8Gi", "ephemeral-storage": "512Mi"},
				Limits:   map[string]string{"cpu": "8", "memory": "24Gi", "ephemeral-storage": "12Gi"},
			},
			Router: RouterConfig{Mode: "kv", KVEvents: true, KVCacheBlockSize: 128},
			// The frontend needs no GPU: the operator's default surge fits any cluster.
			Rollout: Rollout{Strategy: OperatorDefault},
			Env:     offlineEnv(),
		},
	}
	if p == Disaggregated {
		// Prefill and decode move KV over MNNVL: one clique for all six.
		c.Placement.TopologyKey = DefaultTopologyKey
		c.Frontend.Router.TrackActiveBlocks = true
		c.Frontend.Router.TrackOutputBlocks = true
		// The disaggregated frontend loads the tokenizer itself to route prefill and decode.
		c.Frontend.LoadTokenizer = true
		c.PrefillWorker = prefillWorker()
		c.DecodeWorker = decodeWorker()
	} else {
		c.Worker = aggregatedWorker()
	}
	return c
}

func offlineEnv() []EnvVar {
	// Serving reads only the pre-populated cache; never reach the Hub at start-up.
	return []EnvVar{{"HF_HUB_OFFLINE", "1"}, {"TRANSFORMERS_OFFLINE", "1"}}
}

func boolPtr(b bool) *bool { return &b }

// baseWorker holds what every MiniMax M3 worker role shares.
func baseWorker() WorkerConfig {
	return WorkerConfig{
		Replicas:           3,
		TensorParallelSize: 4,
		Resources: Resources{
			// 448Gi covers the NVFP4 weights staged in host memory on one GB200 tray.
			Requests: map[string]string{"cpu": "32", "memory": "448Gi"},
			Limits:   map[string]string{"cpu": "128", "memory": "512Gi"},
		},
		PodAnnotations: map[string]string{"nvidia.com/vllm-distributed-executor-backend": "mp"},
		// A stock GB200 pool taints its trays for GPUs and arm64; the recipe's workers tolerate
		// neither and rely on ExtendedResourceToleration, which many clusters do not enable.
		Scheduling: Scheduling{Tolerations: []Toleration{
			{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"},
			{Key: "kubernetes.io/arch", Operator: "Equal", Value: "arm64", Effect: "NoSchedule"},
		}},
		// No spare GPU slot needed to roll (config.Rollout); OperatorDefault is the recipe's form.
		Rollout: Rollout{Strategy: RollingUpdate},
		// The engine has 4 hours to come up (VLLM_ENGINE_READY_TIMEOUT_S below) and the operator's
		// startup probe would restart it after 2: 1500 failures 10 s apart outlast the engine by
		// 10 minutes, so a worker that cannot come up exits with the engine's own reason.
		Probes: Probes{Startup: &Probe{FailureThreshold: 1500}},
		VLLM: VLLMConfig{
			TrustRemoteCode:     true,
			BlockSize:           128,
			MaxModelLen:         1048576,
			EnablePrefixCaching: true,
			KVCacheMetrics:      true,
			KVCacheDtype:        "fp8",
			EnableMultimodal:    true,
			FrontendDecoding:    true,
			MMEncoderTPMode:     "data",
			SkipMMProfiling:     true,
			FlashinferAutotune:  boolPtr(false),
			BF16x3RouterGemm:    true,
			AttentionConfig:     attentionConfig,
			CompilationConfig:   compilationConfig8K,
			KVEventsConfig:      kvEventsConfig,
			ToolCallParser:      "minimax_m3",
			DynReasoningParser:  "minimax_m3",
			ReasoningParser:     "minimax_m3",
		},
	}
}

func aggregatedWorker() WorkerConfig {
	w := baseWorker()
	// Shared memory holds the CPU KV offload tier and the multiprocess executor's tensors.
	w.SharedMemorySize = "448Gi"
	w.Resources.Limits["memory"] = "640Gi"
	w.VLLM.GPUMemoryUtilization = 0.9
	w.VLLM.MaxNumSeqs = 256
	w.VLLM.MaxNumBatchedTokens = 16384
	w.VLLM.KVTransfer = KVTransfer{
		Connector:         "OffloadingConnector",
		Role:              "kv_both",
		LoadFailurePolicy: "recompute",
		CPUOffload: &CPUOffload{
			SpecName:               "CPUOffloadingSpec",
			CPUBytesToUse:          400000000000,
			BlockSize:              128,
			StoreThreshold:         2,
			SelfDescribingKVEvents: true,
		},
	}
	w.Env = []EnvVar{
		{"HF_MODULES_CACHE", "/tmp/hf_modules"},
		{"PYTHONHASHSEED", "0"},
		{"HF_HUB_OFFLINE", "1"},
		{"TRANSFORMERS_OFFLINE", "1"},
		{"VLLM_ENGINE_READY_TIMEOUT_S", "14400"},
		{"VLLM_FLOAT32_MATMUL_PRECISION", "high"},
		{"VLLM_FLASHINFER_ALLREDUCE_BACKEND", "mnnvl"},
		{"NCCL_MNNVL_ENABLE", "1"},
		{"NCCL_CUMEM_ENABLE", "1"},
	}
	return w
}

func disaggregatedWorker(flashinferWorkspace string) WorkerConfig {
	w := baseWorker()
	w.SharedMemorySize = "64Gi"
	w.TerminationGracePeriodSeconds = 60
	w.VLLM.EnableCumemAllocator = true
	// NIXL moves KV from prefill to decode over multi-node NVLink (UCX cuda_ipc with MNNVL).
	w.VLLM.KVTransfer = KVTransfer{Connector: "NixlConnector", Role: "kv_both"}
	// FlashInfer's JIT workspace lives on the cache, so restarts reuse compiled kernels.
	w.FlashinferWorkspace = flashinferWorkspace
	w.Env = []EnvVar{
		{"HF_HUB_OFFLINE", "1"},
		{"TRANSFORMERS_OFFLINE", "1"},
		{"VLLM_ENGINE_READY_TIMEOUT_S", "14400"},
		{"VLLM_FLOAT32_MATMUL_PRECISION", "high"},
		{"VLLM_FLASHINFER_ALLREDUCE_BACKEND", "mnnvl"},
		{"VLLM_USE_NCCL_SYMM_MEM", "0"},
		{"NCCL_MNNVL_ENABLE", "1"},
		{"NCCL_CUMEM_ENABLE", "1"},
		{"NCCL_NVLS_ENABLE", "1"},
		{"NCCL_P2P_LEVEL", "NVL"},
		{"UCX_TLS", "cuda_copy,cuda_ipc,tcp"},
		{"UCX_CUDA_IPC_ENABLE_MNNVL", "y"},
		{"ETCD_LEASE_TTL", "120"},
		{"VLLM_RPC_TIMEOUT", "600000"},
		{"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1800"},
		{"VLLM_CONNECTOR_PREFETCH_DEPTH", "8"},
		{"VLLM_CONNECTOR_PREFETCH_KV_CAP", "0.65"},
	}
	return w
}

func prefillWorker() WorkerConfig {
	w := disaggregatedWorker("flashinfer-workspaces/fi-23945310-sm100-d07-prefill-v2")
	// Prefill workers route among themselves on KV overlap but do not track decode output.
	w.VLLM.RouterMode = "kv"
	w.VLLM.RouterTrackOutputBlocks = boolPtr(false)
	w.VLLM.GPUMemoryUtilization = 0.8
	w.VLLM.MaxNumSeqs = 32
	w.VLLM.MaxNumBatchedTokens = 24576
	w.VLLM.CompilationConfig = compilationConfig16K
	return w
}

func decodeWorker() WorkerConfig {
	w := disaggregatedWorker("flashinfer-workspaces/fi-23945310-sm100")
	w.VLLM.GPUMemoryUtilization = 0.9
	w.VLLM.MaxNumSeqs = 256
	w.VLLM.MaxNumBatchedTokens = 8192
	return w
}
