package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/config"
)

// SpeculativeConfigChecksum is the worker pod-template annotation that carries a checksum of the
// speculative config the workers read from the ConfigMap by reference. A change of that config
// changes the pod template, so the Dynamo operator rolls the workers instead of leaving them on the
// old draft. It is left out while the workers read exactly the recipe's published config, so a
// graph deployed by the recipe is adopted without a restart; every other value has its own
// checksum, so any change of the config still changes the template.
const SpeculativeConfigChecksum = "minimax-m3.io/speculative-config-sha256"

// GraphSpec builds the DynamoGraphDeployment spec: Frontend first, then the profile's workers, in
// the recipe's order (the starter's guarded patches rely on these positions), then the endpoint
// picker when the route goes to an InferencePool. d is what the pre-deploy checks decided from the
// cluster (the zero value: the graph as configured).
func GraphSpec(c *config.Config, d Decisions) (DynamoGraphDeploymentSpec, error) {
	spec := DynamoGraphDeploymentSpec{BackendFramework: "vllm"}
	if r := c.Restart; r.ID != "" {
		spec.Restart = &GraphRestart{ID: r.ID}
		if r.Strategy != "" || len(r.Order) > 0 {
			spec.Restart.Strategy = &GraphRestartStrategy{Type: r.Strategy, Order: r.Order}
		}
	}
	frontend, err := frontendComponent(c)
	if err != nil {
		return spec, err
	}
	spec.Components = append(spec.Components, frontend)
	checksum := speculativeChecksum(c) // every worker role reads the same config
	for _, r := range c.Workers() {
		w, err := workerComponent(c, d, r, checksum)
		if err != nil {
			return spec, err
		}
		spec.Components = append(spec.Components, w)
	}
	if c.InferencePool() {
		spec.Components = append(spec.Components, endpointPickerComponent(c))
	}
	return spec, nil
}

// FrontendArgs is the `python3` argument list of the frontend.
func FrontendArgs(c *config.Config) []string {
	f := c.Frontend
	args := []string{"-m", "dynamo.frontend", "--router-mode", f.Router.Mode}
	args = appendFlag(args, f.Router.KVEvents, "--router-kv-events")
	args = appendFlag(args, f.Router.TrackActiveBlocks, "--router-track-active-blocks")
	args = appendFlag(args, f.Router.TrackOutputBlocks, "--router-track-output-blocks")
	args = append(args,
		"--http-host", "0.0.0.0",
		"--http-port", strconv.Itoa(config.FrontendPort),
		"--kv-cache-block-size", strconv.Itoa(f.Router.KVCacheBlockSize))
	if f.LoadTokenizer {
		args = append(args, "--model-name", c.Model.Name, "--trust-remote-code")
	}
	return append(args, f.ExtraArgs...)
}

func frontendComponent(c *config.Config) (GraphComponent, error) {
	f := c.Frontend
	spec := SitePodSpec(c.ImagePullSecrets, f.Scheduling)
	spec.Containers = []corev1.Container{{
		Name:            MainContainer,
		Image:           c.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"python3"},
		Args:            FrontendArgs(c),
		Env:             literalEnv(f.Env, f.ExtraEnv),
		Resources:       Resources(f.Resources, nil),
	}}
	annotations := maps.Clone(f.PodAnnotations)
	if a := f.Rollout.Annotations(); a != nil {
		if annotations == nil {
			annotations = map[string]string{}
		}
		maps.Copy(annotations, a)
	}
	template, err := f.PodTemplatePatch.Apply(corev1.PodTemplateSpec{ObjectMeta: podMetadata(annotations), Spec: spec})
	if err != nil {
		return GraphComponent{}, err
	}
	return GraphComponent{
		Name:                   FrontendName,
		Type:                   "frontend",
		RuntimeVersionOverride: c.RuntimeVersion,
		Replicas:               f.Replicas,
		ScalingAdapter:         scalingAdapter(f.ScalingAdapter),
		PodTemplate:            template,
	}, nil
}

// WorkerEnv is a worker role's environment in the recipe's order: what the program derives from
// other settings, the recipe's tuning, the site's network variables, then the role's extra env.
func WorkerEnv(c *config.Config, r config.Role) []corev1.EnvVar {
	w := r.Config
	kvTransfer := w.VLLM.KVTransferConfig
	if kvTransfer == "" {
		kvTransfer = KVTransferConfig(w.VLLM.KVTransfer)
	}
	env := []corev1.EnvVar{
		{Name: "KV_TRANSFER_CONFIG", Value: kvTransfer},
		{Name: "SPECULATIVE_CONFIG", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: c.ConfigMapName()}, Key: c.SpeculativeConfigKey(),
		}}},
		{Name: "MODEL_NAME", Value: c.Model.Name},
		{Name: "SERVED_MODEL_NAME", Value: c.ServedModelName()},
		// Workers read the model from the cache the download Job filled.
		{Name: "HF_HOME", Value: c.ModelCache.MountPath},
	}
	if w.FlashinferWorkspace != "" {
		env = append(env, corev1.EnvVar{Name: "FLASHINFER_WORKSPACE_BASE", Value: path.Join(c.ModelCache.MountPath, w.FlashinferWorkspace)})
	}
	return append(env, literalEnv(w.Env, w.Network.Env(), w.ExtraEnv)...)
}

func workerComponent(c *config.Config, d Decisions, r config.Role, speculativeChecksum string) (GraphComponent, error) {
	w := r.Config
	netResources, netAnnotations := networkSettings(w.Network)

	annotations := map[string]string{}
	for _, m := range []map[string]string{w.PodAnnotations, netAnnotations, w.Rollout.Annotations()} {
		for k, v := range m {
			annotations[k] = v
		}
	}
	if speculativeChecksum != "" {
		annotations[SpeculativeConfigChecksum] = speculativeChecksum
	}

	// GPUs and network resources are requested and limited alike.
	extended := map[string]string{config.GPUResource: strconv.Itoa(w.TensorParallelSize)}
	for k, v := range netResources {
		extended[k] = v
	}
	root := int64(0)
	container := corev1.Container{
		Name:            MainContainer,
		Image:           c.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"python3"},
		Args:            WorkerArgs(c, r),
		// vLLM pins memory and traces its workers; NCCL raises memlock limits.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:    &root,
			RunAsGroup:   &root,
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK", "SYS_PTRACE", "SYS_RESOURCE"}},
		},
		Env:            WorkerEnv(c, r),
		Resources:      Resources(w.Resources, extended, channelClaimName),
		VolumeMounts:   []corev1.VolumeMount{{Name: CacheVolumeName, MountPath: c.ModelCache.MountPath}},
		StartupProbe:   probe("startup", w.Probes.Startup),
		LivenessProbe:  probe("liveness", w.Probes.Liveness),
		ReadinessProbe: probe("readiness", w.Probes.Readiness),
	}

	spec := SitePodSpec(c.ImagePullSecrets, d.WorkerScheduling(w.Scheduling))
	// Every worker joins the graph's NVLink ComputeDomain through its channel claim.
	channel := c.ChannelClaimTemplateName()
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: channelClaimName, ResourceClaimTemplateName: &channel}}
	spec.Containers = []corev1.Container{container}
	if c.InferencePool() {
		spec.Containers = append(spec.Containers, frontendSidecar(c))
	}
	spec.Volumes = []corev1.Volume{{
		Name:         CacheVolumeName,
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ModelCache.ClaimName}},
	}}
	if g := int64(w.TerminationGracePeriodSeconds); g > 0 {
		spec.TerminationGracePeriodSeconds = &g
	}
	if key := c.Placement.TopologyKey; key != "" {
		if spec.Affinity == nil {
			spec.Affinity = &corev1.Affinity{}
		}
		// All of a graph's workers land in one NVLink clique, so KV moves over MNNVL.
		spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey:    key,
			MatchLabelKeys: []string{"nvidia.com/dynamo-graph-deployment-name"},
			LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "nvidia.com/dynamo-component-type", Operator: metav1.LabelSelectorOpIn, Values: []string{"worker", "prefill", "decode"},
			}}},
		}}}
	}

	template, err := w.PodTemplatePatch.Apply(corev1.PodTemplateSpec{ObjectMeta: podMetadata(annotations), Spec: spec})
	if err != nil {
		return GraphComponent{}, err
	}
	if key, clique := c.Placement.TopologyKey, d.CliqueOf(c); key != "" && clique != "" {
		// The clique chosen for the graph (placement.clique, or the one `up` chose): a node
		// affinity keeps every worker, and every replacement, in it. Added after the patch, which
		// could otherwise replace the node selector terms and drop it.
		requireNodeLabel(&template.Spec, key, clique)
	}
	out := GraphComponent{
		Name:                   r.Name,
		Type:                   r.Type,
		RuntimeVersionOverride: c.RuntimeVersion,
		Replicas:               w.Replicas,
		SharedMemorySize:       w.SharedMemorySize,
		ScalingAdapter:         scalingAdapter(w.ScalingAdapter),
		PodTemplate:            template,
	}
	if c.InferencePool() {
		sidecar := FrontendSidecarName
		out.FrontendSidecar = &sidecar
	}
	return out, nil
}

func scalingAdapter(on bool) *ScalingAdapter {
	if !on {
		return nil
	}
	return &ScalingAdapter{}
}

// speculativeChecksum is the checksum annotation's value, or "" while the workers read the
// recipe's own speculative config.
func speculativeChecksum(c *config.Config) string {
	key := c.SpeculativeConfigKey()
	value := SpeculativeConfigs(c)[key]
	recipe := config.Defaults(c.Profile)
	if value == SpeculativeConfigs(&recipe)[key] {
		return ""
	}
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:])
}

// The groups of a worker's flags, and the order each role has them in the recipe: the program emits
// a graph exactly as the recipe does, so adopting a recipe deployment changes nothing in its spec.
const (
	argsModule = iota
	argsRouter
	argsModel
	argsMultimodal
	argsScheduler
	argsKernels
	argsKVTransfer
	argsKVEvents
	argsParsers
)

var workerArgOrder = map[string][]int{
	"worker":  {argsModule, argsRouter, argsModel, argsMultimodal, argsScheduler, argsKernels, argsKVTransfer, argsParsers, argsKVEvents},
	"prefill": {argsModule, argsRouter, argsModel, argsScheduler, argsMultimodal, argsKernels, argsKVTransfer, argsParsers, argsKVEvents},
	"decode":  {argsModule, argsRouter, argsModel, argsScheduler, argsMultimodal, argsKernels, argsKVTransfer, argsKVEvents, argsParsers},
}

// WorkerArgs is the `python3` argument list of a worker role.
func WorkerArgs(c *config.Config, r config.Role) []string {
	f := r.Config.VLLM
	groups := make([][]string, argsParsers+1)
	groups[argsModule] = []string{"-m", "dynamo.vllm"}
	if f.RouterMode != "" {
		groups[argsRouter] = append(groups[argsRouter], "--router-mode", f.RouterMode)
	}
	if f.RouterTrackOutputBlocks != nil {
		groups[argsRouter] = append(groups[argsRouter], boolFlag("router-track-output-blocks", *f.RouterTrackOutputBlocks))
	}
	groups[argsModel] = appendFlag([]string{
		"--model", "$(MODEL_NAME)",
		"--revision", c.Model.Revision,
		"--served-model-name", "$(SERVED_MODEL_NAME)",
	}, f.TrustRemoteCode, "--trust-remote-code")

	mm := appendFlag(nil, f.EnableMultimodal, "--enable-multimodal")
	mm = appendFlag(mm, f.FrontendDecoding, "--frontend-decoding")
	mm = appendValue(mm, "--mm-encoder-tp-mode", f.MMEncoderTPMode)
	groups[argsMultimodal] = appendFlag(mm, f.SkipMMProfiling, "--skip-mm-profiling")

	s := []string{
		"--tensor-parallel-size", strconv.Itoa(r.Config.TensorParallelSize),
		"--block-size", strconv.Itoa(f.BlockSize),
		"--gpu-memory-utilization", FormatFloat(f.GPUMemoryUtilization),
		"--max-model-len", strconv.Itoa(f.MaxModelLen),
		"--max-num-seqs", strconv.Itoa(f.MaxNumSeqs),
		"--max-num-batched-tokens", strconv.Itoa(f.MaxNumBatchedTokens),
	}
	s = appendFlag(s, f.EnablePrefixCaching, "--enable-prefix-caching")
	s = appendFlag(s, f.KVCacheMetrics, "--kv-cache-metrics")
	groups[argsScheduler] = append(s, "--kv-cache-dtype", f.KVCacheDtype)

	k := appendFlag(nil, f.EnableCumemAllocator, "--enable-cumem-allocator")
	if f.FlashinferAutotune != nil {
		k = append(k, boolFlag("enable-flashinfer-autotune", *f.FlashinferAutotune))
	}
	k = appendFlag(k, f.BF16x3RouterGemm, "--enable-bf16x3-router-gemm")
	k = appendValue(k, "--attention-config", f.AttentionConfig)
	k = appendValue(k, "--compilation-config", f.CompilationConfig)
	k = append(k, "--speculative-config", "$(SPECULATIVE_CONFIG)")
	if r.Type == "prefill" || r.Type == "decode" {
		k = append(k, "--disaggregation-mode", r.Type)
	}
	groups[argsKernels] = k
	groups[argsKVTransfer] = []string{"--kv-transfer-config", "$(KV_TRANSFER_CONFIG)"}
	groups[argsKVEvents] = appendValue(nil, "--kv-events-config", f.KVEventsConfig)
	p := appendValue(nil, "--dyn-tool-call-parser", f.ToolCallParser)
	p = appendValue(p, "--dyn-reasoning-parser", f.DynReasoningParser)
	groups[argsParsers] = appendValue(p, "--reasoning-parser", f.ReasoningParser)

	var args []string
	for _, g := range workerArgOrder[r.Type] {
		args = append(args, groups[g]...)
	}
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

func FormatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
