package config

import (
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// WorkerConfig is one vLLM worker role.
type WorkerConfig struct {
	Replicas           int       `json:"replicas"`
	TensorParallelSize int       `json:"tensorParallelSize"`
	SharedMemorySize   string    `json:"sharedMemorySize"`
	Resources          Resources `json:"resources"`
	// TerminationGracePeriodSeconds lets a worker drain; 0 keeps the Kubernetes default.
	TerminationGracePeriodSeconds int               `json:"terminationGracePeriodSeconds"`
	PodAnnotations                map[string]string `json:"podAnnotations"`
	// Rollout is how the operator replaces the role's pods on a change.
	Rollout    Rollout    `json:"rollout"`
	Scheduling Scheduling `json:"scheduling"`
	Network    Network    `json:"network"`
	Probes     Probes     `json:"probes"`
	VLLM       VLLMConfig `json:"vllm"`
	// FlashinferWorkspace is the FlashInfer workspace folder below the cache mount
	// (FLASHINFER_WORKSPACE_BASE = modelCache.mountPath/FlashinferWorkspace); empty sets none.
	FlashinferWorkspace string `json:"flashinferWorkspace"`
	// Env is the recipe's tuning environment, in order; ExtraEnv is appended after the site's network
	// variables. A name may appear only once across all of them.
	Env       []EnvVar `json:"env"`
	ExtraArgs []string `json:"extraArgs"`
	ExtraEnv  []EnvVar `json:"extraEnv"`
	// PodTemplatePatch is applied to the role's pod template last.
	PodTemplatePatch PodTemplatePatch `json:"podTemplatePatch"`
	// ScalingAdapter hands the role's replicas to the graph's scaling adapter (an autoscaler);
	// Pulumi then stops writing them.
	ScalingAdapter bool `json:"scalingAdapter"`
}

// DerivedWorkerEnv are the variables the program sets on every worker from other settings.
var DerivedWorkerEnv = []string{"KV_TRANSFER_CONFIG", "SPECULATIVE_CONFIG", "MODEL_NAME", "SERVED_MODEL_NAME", "HF_HOME", "FLASHINFER_WORKSPACE_BASE"}

// GPUResource is the device-plugin resource a worker requests, one per tensor-parallel rank.
const GPUResource = "nvidia.com/gpu"

func (w WorkerConfig) validate(v validator, k string, c *Config, r Role) {
	v.atLeast(k+".replicas", w.Replicas, 1)
	switch tp := w.TensorParallelSize; {
	case tp < 1:
		v.add(k+".tensorParallelSize", "must be at least 1, got %d", tp)
	case c.GPUsPerNode >= 1 && (tp > c.GPUsPerNode || c.GPUsPerNode%tp != 0):
		v.add(k+".tensorParallelSize", "%d does not fit %d GPUs per node (gpusPerNode): a worker runs on one node, so TP must divide it", tp, c.GPUsPerNode)
	}
	v.positiveQuantity(k+".sharedMemorySize", w.SharedMemorySize)
	w.Resources.validate(v, k+".resources")
	for _, res := range []map[string]string{w.Resources.Requests, w.Resources.Limits} {
		if _, ok := res[GPUResource]; ok {
			v.add(k+".resources", "must not set %s: it follows tensorParallelSize", GPUResource)
			break
		}
	}
	if w.TerminationGracePeriodSeconds < 0 {
		v.add(k+".terminationGracePeriodSeconds", "must not be negative")
	}
	v.annotations(k+".podAnnotations", w.PodAnnotations)
	operatorAnnotations(v, k+".podAnnotations", w.PodAnnotations, true)
	w.Rollout.validate(v, k+".rollout", w.Replicas, w.PodAnnotations)
	w.Scheduling.validate(v, k+".scheduling")
	w.Network.validate(v, k+".network")
	w.Probes.validate(v, k+".probes")
	if ws := w.FlashinferWorkspace; ws != "" && (path.IsAbs(ws) || path.Clean(ws) != ws || strings.HasPrefix(ws, "..")) {
		v.add(k+".flashinferWorkspace", "%q must be a clean path below modelCache.mountPath (for example flashinfer-workspaces/decode)", ws)
	}
	fixed := slices.Clone(DerivedWorkerEnv)
	for _, e := range w.Network.Env() {
		fixed = append(fixed, e.Name)
	}
	v.env(k, fixed, w.Env, w.ExtraEnv)
	w.VLLM.validate(v, k+".vllm", r)
	w.PodTemplatePatch.validate(v, k+".podTemplatePatch", c.PodProfile(true))
	w.fits(v, k)
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
	AttentionConfig    string `json:"attentionConfig"`
	CompilationConfig  string `json:"compilationConfig"`
	KVEventsConfig     string `json:"kvEventsConfig"`
	ToolCallParser     string `json:"toolCallParser"`
	DynReasoningParser string `json:"dynReasoningParser"`
	ReasoningParser    string `json:"reasoningParser"`
	// KVTransfer builds vLLM's kv-transfer-config; KVTransferConfig, a JSON object, replaces it
	// whole (the starter's kv-transfer patch).
	KVTransfer       KVTransfer `json:"kvTransfer"`
	KVTransferConfig string     `json:"kvTransferConfig"`
}

// The block sizes of the vLLM engine the runtime image ships (vllm/config/cache.py: BlockSize;
// its CacheDType and MMEncoderTPMode are in Choices).
var vllmBlockSizes = []int{1, 8, 16, 32, 64, 128, 256}

func (f VLLMConfig) validate(v validator, vk string, r Role) {
	for name, n := range map[string]int{"maxModelLen": f.MaxModelLen, "maxNumSeqs": f.MaxNumSeqs, "maxNumBatchedTokens": f.MaxNumBatchedTokens} {
		v.atLeast(vk+"."+name, n, 1)
	}
	if !slices.Contains(vllmBlockSizes, f.BlockSize) {
		sizes := make([]string, len(vllmBlockSizes))
		for i, s := range vllmBlockSizes {
			sizes[i] = strconv.Itoa(s)
		}
		v.add(vk+".blockSize", "%d is not a vLLM block size (%s)", f.BlockSize, strings.Join(sizes, ", "))
	}
	// vLLM's scheduler refuses to start when a batch cannot hold one token of every sequence.
	if f.MaxNumSeqs >= 1 && f.MaxNumBatchedTokens >= 1 && f.MaxNumBatchedTokens < f.MaxNumSeqs {
		v.add(vk+".maxNumBatchedTokens", "%d is below maxNumSeqs %d: vLLM requires max_num_batched_tokens >= max_num_seqs", f.MaxNumBatchedTokens, f.MaxNumSeqs)
	}
	if f.GPUMemoryUtilization <= 0 || f.GPUMemoryUtilization > 1 {
		v.add(vk+".gpuMemoryUtilization", "%g is outside (0, 1]", f.GPUMemoryUtilization)
	}
	v.choice(vk+".kvCacheDtype", reflect.TypeFor[VLLMConfig](), "kvCacheDtype", f.KVCacheDtype)
	v.choice(vk+".mmEncoderTpMode", reflect.TypeFor[VLLMConfig](), "mmEncoderTpMode", f.MMEncoderTPMode)
	if f.FrontendDecoding && !f.EnableMultimodal {
		v.add(vk+".frontendDecoding", "needs enableMultimodal: the frontend decodes images for a multimodal worker")
	}
	v.jsonObject(vk+".attentionConfig", f.AttentionConfig)
	v.jsonObject(vk+".compilationConfig", f.CompilationConfig)
	v.jsonObject(vk+".kvEventsConfig", f.KVEventsConfig)

	disaggregated := r.Type == "prefill" || r.Type == "decode"
	if f.KVTransferConfig != "" {
		obj := v.jsonObject(vk+".kvTransferConfig", f.KVTransferConfig)
		for _, field := range []string{"kv_connector", "kv_role"} {
			if s, ok := obj[field].(string); obj != nil && (!ok || s == "") {
				v.add(vk+".kvTransferConfig", "needs %q, a non-empty string", field)
			}
		}
		return
	}
	v.nonEmpty(vk+".kvTransfer.connector", f.KVTransfer.Connector)
	v.nonEmpty(vk+".kvTransfer.role", f.KVTransfer.Role)
	if o := f.KVTransfer.CPUOffload; o != nil {
		if disaggregated {
			v.add(vk+".kvTransfer.cpuOffload", "disaggregated workers move KV with NIXL; CPU offload is for the aggregated profile")
		}
		if o.CPUBytesToUse < 1 {
			v.add(vk+".kvTransfer.cpuOffload.cpuBytesToUse", "must be at least 1, got %d", o.CPUBytesToUse)
		}
		v.nonEmpty(vk+".kvTransfer.cpuOffload.specName", o.SpecName)
	}
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
