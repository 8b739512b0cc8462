package components

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"minimax-m3/config"
)

// Names the graph's pods share with the ComputeDomain claim chain and the model cache volume.
const (
	channelClaimName = "compute-domain-channel"
	cacheVolumeName  = "shared-model-cache"
	mainContainer    = "main"
	// SystemPort is the named port the Dynamo operator exposes for worker health (/live).
	systemPort = "system"
)

// GraphSpec builds the DynamoGraphDeployment spec: Frontend first, then the profile's workers, in
// the recipe's order (the starter's guarded patches rely on these positions).
func GraphSpec(c *config.Config) DynamoGraphDeploymentSpec {
	spec := DynamoGraphDeploymentSpec{BackendFramework: "vllm"}
	spec.Components = append(spec.Components, frontendComponent(c))
	for _, r := range c.Workers() {
		spec.Components = append(spec.Components, workerComponent(c, r))
	}
	return spec
}

func frontendComponent(c *config.Config) GraphComponent {
	f := c.Frontend
	args := []string{"-m", "dynamo.frontend", "--router-mode", f.Router.Mode}
	args = appendFlag(args, f.Router.KVEvents, "--router-kv-events")
	args = appendFlag(args, f.Router.TrackActiveBlocks, "--router-track-active-blocks")
	args = appendFlag(args, f.Router.TrackOutputBlocks, "--router-track-output-blocks")
	args = append(args,
		"--http-host", "0.0.0.0",
		"--http-port", strconv.Itoa(f.HTTPPort),
		"--kv-cache-block-size", strconv.Itoa(f.Router.KVCacheBlockSize))
	if f.ModelName != "" {
		args = append(args, "--model-name", f.ModelName)
	}
	args = appendFlag(args, f.TrustRemoteCode, "--trust-remote-code")
	args = append(args, f.ExtraArgs...)

	env := append(literalEnv(f.Env), literalEnv(f.ExtraEnv)...)
	return GraphComponent{
		Name:                   "Frontend",
		Type:                   "frontend",
		RuntimeVersionOverride: c.RuntimeVersion,
		Replicas:               f.Replicas,
		PodTemplate: PodTemplate{
			Metadata: podMetadata(f.PodAnnotations),
			Spec: withScheduling(PodSpec{
				ImagePullSecrets: pullSecrets(c),
				Containers: []Container{{
					Name:            mainContainer,
					Image:           c.Image,
					ImagePullPolicy: "IfNotPresent",
					Command:         []string{"python3"},
					Args:            args,
					Env:             env,
					Resources:       resources(f.Resources, nil, nil),
				}},
			}, f.Scheduling),
		},
	}
}

func workerComponent(c *config.Config, r config.Role) GraphComponent {
	w := r.Config
	netResources, netAnnotations := networkSettings(w.Network)

	annotations := map[string]string{}
	for _, m := range []map[string]string{w.PodAnnotations, netAnnotations} {
		for k, v := range m {
			annotations[k] = v
		}
	}

	env := []EnvVar{
		{Name: "KV_TRANSFER_CONFIG", Value: KVTransferConfig(w.VLLM.KVTransfer)},
		{Name: "SPECULATIVE_CONFIG", ValueFrom: &EnvVarSource{ConfigMapKeyRef: &KeySelector{Name: c.ConfigMapName(), Key: c.SpeculativeConfigKey()}}},
		{Name: "MODEL_NAME", Value: c.Model.Name},
		{Name: "SERVED_MODEL_NAME", Value: c.Model.ServedModelName},
		// Workers read the model from the cache the download Job filled.
		{Name: "HF_HOME", Value: c.ModelCache.MountPath},
	}
	env = append(env, literalEnv(w.Env)...)
	env = append(env, literalEnv(w.Network.Env())...)
	env = append(env, literalEnv(w.ExtraEnv)...)

	// GPUs and network resources are requested and limited alike.
	extended := map[string]string{config.GPUResource: strconv.Itoa(w.TensorParallelSize)}
	for k, v := range netResources {
		extended[k] = v
	}
	container := Container{
		Name:            mainContainer,
		Image:           c.Image,
		ImagePullPolicy: "IfNotPresent",
		Command:         []string{"python3"},
		Args:            WorkerArgs(c, r),
		// vLLM pins memory and traces its workers; NCCL raises memlock limits.
		SecurityContext: &SecurityContext{
			RunAsUser:    int64Ptr(0),
			RunAsGroup:   int64Ptr(0),
			Capabilities: &Capabilities{Add: []string{"IPC_LOCK", "SYS_PTRACE", "SYS_RESOURCE"}},
		},
		Env:          env,
		Resources:    resources(w.Resources, extended, []NamedObject{{Name: channelClaimName}}),
		VolumeMounts: []VolumeMount{{Name: cacheVolumeName, MountPath: c.ModelCache.MountPath}},
	}
	if n := w.StartupProbe.FailureThreshold; n > 0 {
		container.StartupProbe = &Probe{HTTPGet: &HTTPGetAction{Path: "/live", Port: systemPort}, PeriodSeconds: 10, FailureThreshold: n}
	}

	spec := PodSpec{
		ImagePullSecrets: pullSecrets(c),
		// Every worker joins the graph's NVLink ComputeDomain through its channel claim.
		ResourceClaims: []PodResourceClaim{{Name: channelClaimName, ResourceClaimTemplateName: c.ChannelClaimTemplateName()}},
		Containers:     []Container{container},
		Volumes: []Volume{{
			Name:                  cacheVolumeName,
			PersistentVolumeClaim: &PersistentVolumeClaim{ClaimName: c.ModelCache.ClaimName},
		}},
	}
	if w.TerminationGracePeriodSeconds > 0 {
		spec.TerminationGracePeriodSeconds = int64Ptr(int64(w.TerminationGracePeriodSeconds))
	}
	spec = withScheduling(spec, w.Scheduling)
	if key := c.Placement.TopologyKey; key != "" {
		if spec.Affinity == nil {
			spec.Affinity = &Affinity{}
		}
		// All of a graph's workers land in one NVLink clique, so KV moves over MNNVL.
		spec.Affinity.PodAffinity = &PodAffinity{Required: []PodAffinityTerm{{
			TopologyKey:    key,
			MatchLabelKeys: []string{"nvidia.com/dynamo-graph-deployment-name"},
			LabelSelector: &LabelSelector{MatchExpressions: []Requirement{{
				Key: "nvidia.com/dynamo-component-type", Operator: "In", Values: []string{"worker", "prefill", "decode"},
			}}},
		}}}
	}

	return GraphComponent{
		Name:                   r.Name,
		Type:                   r.Type,
		RuntimeVersionOverride: c.RuntimeVersion,
		Replicas:               w.Replicas,
		SharedMemorySize:       w.SharedMemorySize,
		PodTemplate:            PodTemplate{Metadata: podMetadata(annotations), Spec: spec},
	}
}

// WorkerArgs is the `python3` argument list of a worker role.
func WorkerArgs(c *config.Config, r config.Role) []string {
	f := r.Config.VLLM
	args := []string{"-m", "dynamo.vllm"}
	if f.RouterMode != "" {
		args = append(args, "--router-mode", f.RouterMode)
	}
	if f.RouterTrackOutputBlocks != nil {
		args = append(args, boolFlag("router-track-output-blocks", *f.RouterTrackOutputBlocks))
	}
	args = append(args,
		"--model", "$(MODEL_NAME)",
		"--revision", c.Model.Revision,
		"--served-model-name", "$(SERVED_MODEL_NAME)")
	args = appendFlag(args, f.TrustRemoteCode, "--trust-remote-code")
	args = append(args,
		"--tensor-parallel-size", strconv.Itoa(r.Config.TensorParallelSize),
		"--block-size", strconv.Itoa(f.BlockSize),
		"--gpu-memory-utilization", formatFloat(f.GPUMemoryUtilization),
		"--max-model-len", strconv.Itoa(f.MaxModelLen),
		"--max-num-seqs", strconv.Itoa(f.MaxNumSeqs),
		"--max-num-batched-tokens", strconv.Itoa(f.MaxNumBatchedTokens))
	args = appendFlag(args, f.EnablePrefixCaching, "--enable-prefix-caching")
	args = appendFlag(args, f.KVCacheMetrics, "--kv-cache-metrics")
	args = append(args, "--kv-cache-dtype", f.KVCacheDtype)
	args = appendFlag(args, f.EnableMultimodal, "--enable-multimodal")
	args = appendFlag(args, f.FrontendDecoding, "--frontend-decoding")
	if f.MMEncoderTPMode != "" {
		args = append(args, "--mm-encoder-tp-mode", f.MMEncoderTPMode)
	}
	args = appendFlag(args, f.SkipMMProfiling, "--skip-mm-profiling")
	args = appendFlag(args, f.EnableCumemAllocator, "--enable-cumem-allocator")
	if f.FlashinferAutotune != nil {
		args = append(args, boolFlag("enable-flashinfer-autotune", *f.FlashinferAutotune))
	}
	args = appendFlag(args, f.BF16x3RouterGemm, "--enable-bf16x3-router-gemm")
	args = appendValue(args, "--attention-config", f.AttentionConfig)
	args = appendValue(args, "--compilation-config", f.CompilationConfig)
	args = append(args, "--speculative-config", "$(SPECULATIVE_CONFIG)")
	if r.Type == "prefill" || r.Type == "decode" {
		args = append(args, "--disaggregation-mode", r.Type)
	}
	args = append(args, "--kv-transfer-config", "$(KV_TRANSFER_CONFIG)")
	args = appendValue(args, "--kv-events-config", f.KVEventsConfig)
	args = appendValue(args, "--dyn-tool-call-parser", f.ToolCallParser)
	args = appendValue(args, "--dyn-reasoning-parser", f.DynReasoningParser)
	args = appendValue(args, "--reasoning-parser", f.ReasoningParser)
	return append(args, r.Config.ExtraArgs...)
}

// KVTransferConfig renders vLLM's kv-transfer-config JSON, keys in vLLM's documented order.
func KVTransferConfig(k config.KVTransfer) string {
	type extra struct {
		SpecName               string `json:"spec_name"`
		CPUBytesToUse          int64  `json:"cpu_bytes_to_use"`
		BlockSize              int    `json:"block_size"`
		StoreThreshold         int    `json:"store_threshold"`
		SelfDescribingKVEvents bool   `json:"self_describing_kv_events"`
	}
	out := struct {
		Connector         string `json:"kv_connector"`
		Role              string `json:"kv_role"`
		LoadFailurePolicy string `json:"kv_load_failure_policy,omitempty"`
		Extra             *extra `json:"kv_connector_extra_config,omitempty"`
	}{Connector: k.Connector, Role: k.Role, LoadFailurePolicy: k.LoadFailurePolicy}
	if o := k.CPUOffload; o != nil {
		out.Extra = &extra{o.SpecName, o.CPUBytesToUse, o.BlockSize, o.StoreThreshold, o.SelfDescribingKVEvents}
	}
	b, _ := json.Marshal(out) // plain strings, numbers and booleans: cannot fail
	return string(b)
}

// SpeculativeConfigs renders both ConfigMap entries: real EAGLE3 verification and the
// benchmark-only synthetic acceptance.
func SpeculativeConfigs(c *config.Config) map[string]string {
	type spec struct {
		Method            string   `json:"method"`
		Model             string   `json:"model"`
		Revision          string   `json:"revision"`
		NumTokens         int      `json:"num_speculative_tokens"`
		AttentionBackend  string   `json:"attention_backend"`
		RejectionSample   string   `json:"rejection_sample_method,omitempty"`
		AcceptanceLength  *float64 `json:"synthetic_acceptance_length,omitempty"`
		UseLocalArgmaxRed bool     `json:"use_local_argmax_reduction"`
	}
	s := c.Speculative
	real := spec{s.Method, c.Model.Draft.Name, c.Model.Draft.Revision, s.NumSpeculativeTokens, s.AttentionBackend, "", nil, s.UseLocalArgmax}
	synthetic := real
	synthetic.RejectionSample = "synthetic"
	synthetic.AcceptanceLength = &s.SyntheticAcceptanceLength
	render := func(v spec) string {
		b, _ := json.MarshalIndent(v, "", "  ") // cannot fail: plain values
		return string(b)
	}
	return map[string]string{"speculative-config": render(real), "speculative-config-synthetic": render(synthetic)}
}

// networkSettings turns a role's network config into extended resources and pod annotations: the
// starter's network-interface Component and its GKE RoCE provider preset. Its environment is
// config.Network.Env.
func networkSettings(n config.Network) (map[string]string, map[string]string) {
	res := map[string]string{}
	ann := map[string]string{}
	for k, v := range n.PodAnnotations {
		ann[k] = v
	}
	if g := n.GKERoCE; g != nil {
		ifaces := []map[string]string{{"interfaceName": g.DefaultInterface, "network": "default"}}
		for _, ri := range g.RDMAInterfaces {
			ifaces = append(ifaces, map[string]string{"interfaceName": ri.InterfaceName, "network": ri.Network})
			res["networking.gke.io.networks/"+ri.Network] = g.NetworkResourceQuantity
			res["networking.gke.io.networks/"+ri.Network+".IP"] = g.NetworkResourceQuantity
		}
		b, _ := json.Marshal(ifaces)
		ann["networking.gke.io/default-interface"] = g.DefaultInterface
		ann["networking.gke.io/interfaces"] = string(b)
	}
	if n.RDMAResource != "" {
		res[n.RDMAResource] = n.RDMACount
	}
	return res, ann
}

// resources merges configured requests and limits with extras set identically in both (GPUs, RDMA).
func resources(r config.Resources, both map[string]string, claims []NamedObject) *Resources {
	out := &Resources{Claims: claims, Requests: copyMap(r.Requests), Limits: copyMap(r.Limits)}
	for k, v := range both {
		if out.Requests == nil {
			out.Requests = map[string]string{}
		}
		if out.Limits == nil {
			out.Limits = map[string]string{}
		}
		out.Requests[k], out.Limits[k] = v, v
	}
	if out.Claims == nil && out.Requests == nil && out.Limits == nil {
		return nil
	}
	return out
}

func withScheduling(spec PodSpec, s config.Scheduling) PodSpec {
	spec.NodeSelector = copyMap(s.NodeSelector)
	for _, t := range s.Tolerations {
		spec.Tolerations = append(spec.Tolerations, Toleration(t))
	}
	if len(s.RequiredNodeLabels) > 0 {
		var reqs []Requirement
		for _, k := range slices.Sorted(maps.Keys(s.RequiredNodeLabels)) {
			reqs = append(reqs, Requirement{Key: k, Operator: "In", Values: s.RequiredNodeLabels[k]})
		}
		spec.Affinity = &Affinity{NodeAffinity: &NodeAffinity{Required: &NodeSelector{Terms: []NodeSelectorTerm{{MatchExpressions: reqs}}}}}
	}
	spec.SchedulerName = s.SchedulerName
	spec.RuntimeClassName = s.RuntimeClassName
	spec.PriorityClassName = s.PriorityClassName
	return spec
}

func pullSecrets(c *config.Config) []NamedObject {
	var out []NamedObject
	for _, s := range c.ImagePullSecrets {
		out = append(out, NamedObject{Name: s})
	}
	return out
}

func podMetadata(annotations map[string]string) *PodMetadata {
	if len(annotations) == 0 {
		return nil
	}
	return &PodMetadata{Annotations: copyMap(annotations)}
}

func literalEnv(vars []config.EnvVar) []EnvVar {
	out := make([]EnvVar, 0, len(vars))
	for _, v := range vars {
		out = append(out, EnvVar{Name: v.Name, Value: v.Value})
	}
	return out
}

func appendFlag(args []string, on bool, flag string) []string {
	if on {
		return append(args, flag)
	}
	return args
}

func appendValue(args []string, flag, value string) []string {
	if value == "" {
		return args
	}
	return append(args, flag, value)
}

// boolFlag renders an argparse BooleanOptionalAction flag: --name or --no-name.
func boolFlag(name string, on bool) string {
	if on {
		return "--" + name
	}
	return "--no-" + name
}

func int64Ptr(i int64) *int64 { return &i }

func copyMap[V any](m map[string]V) map[string]V {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
