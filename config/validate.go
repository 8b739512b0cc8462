package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Problem is one thing wrong with a stack's config, tied to the key that must change.
type Problem struct {
	Key     string
	Message string
}

func (p Problem) String() string { return Key(p.Key) + ": " + p.Message }

// Problems is every problem found; as an error it lists them all.
type Problems []Problem

// Add records a problem with a key (a dotted path below the namespace).
func (ps *Problems) Add(key, format string, args ...any) {
	*ps = append(*ps, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
}

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = "  - " + p.String()
	}
	return fmt.Sprintf("invalid %s config (%d problem(s)); nothing was changed:\n%s",
		Namespace, len(ps), strings.Join(lines, "\n"))
}

var (
	commitPattern         = regexp.MustCompile(`^[0-9a-f]{40}$`)
	runtimeVersionPattern = regexp.MustCompile(`^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$`)
	// The starter marks every value a site must fill with a `your-` prefix.
	placeholderPattern = regexp.MustCompile(`(^|[^[:alnum:]])your-[[:alnum:]./_-]*`)
)

// Validate checks a Config and returns every problem found.
func Validate(c *Config) Problems {
	var ps Problems
	v := validator{&ps}

	switch c.Profile {
	case Aggregated, Disaggregated:
	case "":
		ps.Add("profile", "is required: %q or %q", Aggregated, Disaggregated)
	default:
		ps.Add("profile", "unknown profile %q: use %q or %q", c.Profile, Aggregated, Disaggregated)
	}
	findPlaceholders(&ps, "", reflect.ValueOf(*c))

	v.dns1035("graphName", c.GraphName+"-frontend", "the frontend Service name %q derived from it")
	if c.GPUsPerNode < 1 {
		ps.Add("gpusPerNode", "must be at least 1, got %d", c.GPUsPerNode)
	}
	v.nonEmpty("image", c.Image)
	if !runtimeVersionPattern.MatchString(c.RuntimeVersion) {
		ps.Add("runtimeVersion", "%q is not a version like 1.6.0", c.RuntimeVersion)
	}
	for i, s := range c.ImagePullSecrets {
		v.dns1123Subdomain(fmt.Sprintf("imagePullSecrets[%d]", i), s)
	}

	if c.Namespace.Name == "" {
		ps.Add("namespace.name", "is required: pulumi config set --path %s <namespace>", Key("namespace.name"))
	} else {
		v.dns1123Label("namespace.name", c.Namespace.Name)
	}

	validateHuggingFace(&ps, v, c)
	validateModel(&ps, v, c)
	validateCache(&ps, v, c)

	if c.ComputeDomain.Name != "" {
		v.dns1123Subdomain("computeDomain.name", c.ComputeDomain.Name)
	}
	if !c.ComputeDomain.Create && c.ComputeDomain.ChannelClaimTemplate == "" {
		ps.Add("computeDomain.channelClaimTemplate", "is required when computeDomain.create is false: name the existing channel ResourceClaimTemplate")
	}
	if c.ComputeDomain.ChannelClaimTemplate != "" {
		v.dns1123Subdomain("computeDomain.channelClaimTemplate", c.ComputeDomain.ChannelClaimTemplate)
	}
	if c.Placement.TopologyKey != "" {
		v.qualifiedName("placement.topologyKey", c.Placement.TopologyKey)
	}
	v.duration("readiness.timeout", c.Readiness.Timeout)

	validateFrontend(&ps, v, c)
	if c.Profile == Aggregated || c.Profile == Disaggregated {
		for _, r := range c.Workers() {
			validateWorker(&ps, v, c, r)
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Key < ps[j].Key })
	return ps
}

func validateHuggingFace(ps *Problems, v validator, c *Config) {
	v.dns1123Subdomain("huggingFace.secretName", c.HuggingFace.SecretName)
	if !c.ModelDownload.Enabled {
		return
	}
	switch {
	case c.HuggingFace.ExistingSecret && c.HFToken != "":
		ps.Add("hfToken", "is set but huggingFace.existingSecret is true: use either the existing Secret %q or a token, not both", c.HuggingFace.SecretName)
	case !c.HuggingFace.ExistingSecret && c.HFToken == "":
		ps.Add("hfToken", "the model download needs a Hugging Face token: pulumi config set --secret %s <token>, or set %s=true to use the existing Secret %q",
			Key("hfToken"), Key("huggingFace.existingSecret"), c.HuggingFace.SecretName)
	}
}

func validateModel(ps *Problems, v validator, c *Config) {
	v.nonEmpty("model.name", c.Model.Name)
	v.nonEmpty("model.servedModelName", c.Model.ServedModelName)
	v.nonEmpty("model.draft.name", c.Model.Draft.Name)
	v.commit("model.revision", c.Model.Revision)
	v.commit("model.draft.revision", c.Model.Draft.Revision)

	s := c.Speculative
	v.nonEmpty("speculativeDecoding.method", s.Method)
	if s.NumSpeculativeTokens < 1 {
		ps.Add("speculativeDecoding.numSpeculativeTokens", "must be at least 1, got %d", s.NumSpeculativeTokens)
	}
	if s.Mode != SpeculativeReal && s.Mode != SpeculativeSynthetic {
		ps.Add("speculativeDecoding.mode", "unknown mode %q: use %q or %q", s.Mode, SpeculativeReal, SpeculativeSynthetic)
	}
	// The accepted length counts the bonus token: at least one more than 1, at most every draft
	// token plus the bonus.
	if max := float64(s.NumSpeculativeTokens + 1); s.SyntheticAcceptanceLength <= 1 || s.SyntheticAcceptanceLength > max {
		ps.Add("speculativeDecoding.syntheticAcceptanceLength", "%g is outside (1, %g] (numSpeculativeTokens+1)", s.SyntheticAcceptanceLength, max)
	}
}

func validateCache(ps *Problems, v validator, c *Config) {
	m := c.ModelCache
	v.dns1123Subdomain("modelCache.claimName", m.ClaimName)
	if m.Create {
		if m.StorageClass != "" {
			v.dns1123Subdomain("modelCache.storageClass", m.StorageClass)
		}
		v.positiveQuantity("modelCache.size", m.Size)
		switch m.AccessMode {
		case "ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod":
		default:
			ps.Add("modelCache.accessMode", "unknown access mode %q (workers on several nodes need ReadWriteMany)", m.AccessMode)
		}
	}
	if !path.IsAbs(m.MountPath) {
		ps.Add("modelCache.mountPath", "%q is not an absolute path", m.MountPath)
	}

	d := c.ModelDownload
	if !d.Enabled {
		return
	}
	v.dns1123Subdomain("modelDownload.jobName", d.JobName)
	v.nonEmpty("modelDownload.image", d.Image)
	v.nonEmpty("modelDownload.hubClientVersion", d.HubClientVersion)
	v.duration("modelDownload.timeout", d.Timeout)
	if d.BackoffLimit < 0 {
		ps.Add("modelDownload.backoffLimit", "must not be negative, got %d", d.BackoffLimit)
	}
	v.resources("modelDownload.resources", d.Resources)
	v.scheduling("modelDownload.scheduling", d.Scheduling)
}

func validateFrontend(ps *Problems, v validator, c *Config) {
	f := c.Frontend
	if f.Replicas < 1 {
		ps.Add("frontend.replicas", "must be at least 1, got %d", f.Replicas)
	}
	if f.HTTPPort < 1 || f.HTTPPort > 65535 {
		ps.Add("frontend.httpPort", "%d is not a port", f.HTTPPort)
	}
	v.nonEmpty("frontend.router.mode", f.Router.Mode)
	if f.Router.KVCacheBlockSize < 1 {
		ps.Add("frontend.router.kvCacheBlockSize", "must be at least 1, got %d", f.Router.KVCacheBlockSize)
	}
	v.resources("frontend.resources", f.Resources)
	v.scheduling("frontend.scheduling", f.Scheduling)
	v.annotations("frontend.podAnnotations", f.PodAnnotations)
	v.env("frontend", nil, f.Env, f.ExtraEnv)
}

// DerivedWorkerEnv are the variables the program sets on every worker from other settings.
var DerivedWorkerEnv = []string{"KV_TRANSFER_CONFIG", "SPECULATIVE_CONFIG", "MODEL_NAME", "SERVED_MODEL_NAME", "HF_HOME"}

func validateWorker(ps *Problems, v validator, c *Config, r Role) {
	k, w := r.Key, r.Config
	if w.Replicas < 1 {
		ps.Add(k+".replicas", "must be at least 1, got %d", w.Replicas)
	}
	switch tp := w.TensorParallelSize; {
	case tp < 1:
		ps.Add(k+".tensorParallelSize", "must be at least 1, got %d", tp)
	case c.GPUsPerNode >= 1 && (tp > c.GPUsPerNode || c.GPUsPerNode%tp != 0):
		ps.Add(k+".tensorParallelSize", "%d does not fit %d GPUs per node (gpusPerNode): a worker runs on one node, so TP must divide it", tp, c.GPUsPerNode)
	}
	v.positiveQuantity(k+".sharedMemorySize", w.SharedMemorySize)
	v.resources(k+".resources", w.Resources)
	for _, res := range []map[string]string{w.Resources.Requests, w.Resources.Limits} {
		if _, ok := res[GPUResource]; ok {
			ps.Add(k+".resources", "must not set %s: it follows tensorParallelSize", GPUResource)
			break
		}
	}
	if w.TerminationGracePeriodSeconds < 0 {
		ps.Add(k+".terminationGracePeriodSeconds", "must not be negative")
	}
	if w.StartupProbe.FailureThreshold < 0 {
		ps.Add(k+".startupProbe.failureThreshold", "must not be negative")
	}
	v.annotations(k+".podAnnotations", w.PodAnnotations)
	v.scheduling(k+".scheduling", w.Scheduling)
	validateNetwork(ps, v, k+".network", w.Network)
	fixed := append([]string{}, DerivedWorkerEnv...)
	for _, e := range w.Network.Env() {
		fixed = append(fixed, e.Name)
	}
	v.env(k, fixed, w.Env, w.ExtraEnv)

	f := w.VLLM
	vk := k + ".vllm"
	for name, n := range map[string]int{"blockSize": f.BlockSize, "maxModelLen": f.MaxModelLen, "maxNumSeqs": f.MaxNumSeqs, "maxNumBatchedTokens": f.MaxNumBatchedTokens} {
		if n < 1 {
			ps.Add(vk+"."+name, "must be at least 1, got %d", n)
		}
	}
	if f.GPUMemoryUtilization <= 0 || f.GPUMemoryUtilization > 1 {
		ps.Add(vk+".gpuMemoryUtilization", "%g is outside (0, 1]", f.GPUMemoryUtilization)
	}
	v.nonEmpty(vk+".kvCacheDtype", f.KVCacheDtype)
	v.jsonObject(vk+".attentionConfig", f.AttentionConfig)
	v.jsonObject(vk+".compilationConfig", f.CompilationConfig)
	v.jsonObject(vk+".kvEventsConfig", f.KVEventsConfig)
	v.nonEmpty(vk+".kvTransfer.connector", f.KVTransfer.Connector)
	v.nonEmpty(vk+".kvTransfer.role", f.KVTransfer.Role)
	if o := f.KVTransfer.CPUOffload; o != nil {
		if o.CPUBytesToUse < 1 {
			ps.Add(vk+".kvTransfer.cpuOffload.cpuBytesToUse", "must be at least 1, got %d", o.CPUBytesToUse)
		}
		v.nonEmpty(vk+".kvTransfer.cpuOffload.specName", o.SpecName)
	}
	if r.Type == "prefill" || r.Type == "decode" {
		if f.KVTransfer.CPUOffload != nil {
			ps.Add(vk+".kvTransfer.cpuOffload", "disaggregated workers move KV with NIXL; CPU offload is for the aggregated profile")
		}
	}
}

// validateNetwork checks a role's network settings.
func validateNetwork(ps *Problems, v validator, k string, n Network) {
	switch {
	case n.RDMAResource != "" && n.RDMACount == "":
		ps.Add(k+".rdmaCount", "is required with rdmaResource %q (the same count is requested and limited)", n.RDMAResource)
	case n.RDMAResource == "" && n.RDMACount != "":
		ps.Add(k+".rdmaResource", "is required with rdmaCount %q", n.RDMACount)
	case n.RDMAResource != "":
		v.qualifiedName(k+".rdmaResource", n.RDMAResource)
		v.positiveQuantity(k+".rdmaCount", n.RDMACount)
	}
	v.annotations(k+".podAnnotations", n.PodAnnotations)
	if g := n.GKERoCE; g != nil {
		v.nonEmpty(k+".gkeRoce.defaultInterface", g.DefaultInterface)
		if len(g.RDMAInterfaces) == 0 {
			ps.Add(k+".gkeRoce.rdmaInterfaces", "needs at least one RDMA interface")
		}
		for i, ri := range g.RDMAInterfaces {
			v.nonEmpty(fmt.Sprintf("%s.gkeRoce.rdmaInterfaces[%d].interfaceName", k, i), ri.InterfaceName)
			v.qualifiedName(fmt.Sprintf("%s.gkeRoce.rdmaInterfaces[%d].network", k, i), "networking.gke.io.networks/"+ri.Network)
		}
		v.positiveQuantity(k+".gkeRoce.networkResourceQuantity", g.NetworkResourceQuantity)
	}
}

// GPUResource is the device-plugin resource a worker requests, one per tensor-parallel rank.
const GPUResource = "nvidia.com/gpu"

type validator struct{ ps *Problems }

func (v validator) nonEmpty(key, s string) {
	if strings.TrimSpace(s) == "" {
		v.ps.Add(key, "must not be empty")
	}
}

func (v validator) errs(key, s, what string, errs []string) {
	if len(errs) > 0 {
		v.ps.Add(key, "%q is not a valid %s: %s", s, what, strings.Join(errs, "; "))
	}
}

func (v validator) dns1123Label(key, s string) {
	v.errs(key, s, "Kubernetes name", validation.IsDNS1123Label(s))
}

func (v validator) dns1123Subdomain(key, s string) {
	v.errs(key, s, "Kubernetes name", validation.IsDNS1123Subdomain(s))
}

func (v validator) dns1035(key, s, what string) {
	if errs := validation.IsDNS1035Label(s); len(errs) > 0 {
		v.ps.Add(key, "%s is not a valid Service name: %s", fmt.Sprintf(what, s), strings.Join(errs, "; "))
	}
}

func (v validator) qualifiedName(key, s string) {
	v.errs(key, s, "qualified name", validation.IsQualifiedName(s))
}

func (v validator) commit(key, s string) {
	if !commitPattern.MatchString(s) {
		v.ps.Add(key, "%q is not a pinned commit (40 lowercase hex characters)", s)
	}
}

func (v validator) duration(key, s string) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		v.ps.Add(key, "%q is not a positive duration such as 4h or 90m", s)
	}
}

func (v validator) quantity(key, s string) (resource.Quantity, bool) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		v.ps.Add(key, "%q is not a Kubernetes quantity", s)
		return q, false
	}
	return q, true
}

func (v validator) positiveQuantity(key, s string) {
	if q, ok := v.quantity(key, s); ok && q.Sign() <= 0 {
		v.ps.Add(key, "%q must be positive", s)
	}
}

func (v validator) resources(key string, r Resources) {
	parsed := map[string]resource.Quantity{}
	for _, name := range slices.Sorted(maps.Keys(r.Limits)) {
		if q, ok := v.quantity(key+".limits."+name, r.Limits[name]); ok {
			parsed[name] = q
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Requests)) {
		q, ok := v.quantity(key+".requests."+name, r.Requests[name])
		if limit, limited := parsed[name]; ok && limited && q.Cmp(limit) > 0 {
			v.ps.Add(key+".requests."+name, "request %s is above its limit %s", r.Requests[name], r.Limits[name])
		}
	}
}

func (v validator) annotations(key string, m map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v.qualifiedName(key+"."+k, k)
	}
}

func (v validator) scheduling(key string, s Scheduling) {
	for _, k := range slices.Sorted(maps.Keys(s.NodeSelector)) {
		v.qualifiedName(key+".nodeSelector", k)
		v.errs(key+".nodeSelector."+k, s.NodeSelector[k], "label value", validation.IsValidLabelValue(s.NodeSelector[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(s.RequiredNodeLabels)) {
		v.qualifiedName(key+".requiredNodeLabels", k)
		if len(s.RequiredNodeLabels[k]) == 0 {
			v.ps.Add(key+".requiredNodeLabels."+k, "needs at least one value")
		}
	}
	for i, t := range s.Tolerations {
		tk := fmt.Sprintf("%s.tolerations[%d]", key, i)
		switch t.Operator {
		case "", "Equal":
		case "Exists":
			if t.Value != "" {
				v.ps.Add(tk+".value", "must be empty with operator Exists")
			}
		default:
			v.ps.Add(tk+".operator", "unknown operator %q: use Equal or Exists", t.Operator)
		}
		switch t.Effect {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			v.ps.Add(tk+".effect", "unknown effect %q", t.Effect)
		}
	}
	for name, s := range map[string]string{"schedulerName": s.SchedulerName, "runtimeClassName": s.RuntimeClassName, "priorityClassName": s.PriorityClassName} {
		if s != "" {
			v.dns1123Subdomain(key+"."+name, s)
		}
	}
}

// env checks variable names, and that no name is set twice: Kubernetes keeps both entries, and which
// one a process sees is not a contract.
func (v validator) env(key string, fixed []string, lists ...[]EnvVar) {
	seen := map[string]bool{}
	for _, n := range fixed {
		seen[n] = true
	}
	for li, list := range lists {
		field := [...]string{"env", "extraEnv"}[li]
		for i, e := range list {
			ek := fmt.Sprintf("%s.%s[%d]", key, field, i)
			if errs := validation.IsEnvVarName(e.Name); len(errs) > 0 {
				v.ps.Add(ek+".name", "%q is not a valid variable name", e.Name)
				continue
			}
			if seen[e.Name] {
				v.ps.Add(ek+".name", "%s is already set (by the recipe, a derived setting or an earlier entry); change that value instead of adding it again", e.Name)
			}
			seen[e.Name] = true
		}
	}
}

func (v validator) jsonObject(key, s string) {
	if s == "" {
		return
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		v.ps.Add(key, "is not a JSON object: %v", err)
	}
}

// findPlaceholders reports every string still carrying a starter placeholder (`your-...`).
func findPlaceholders(ps *Problems, key string, v reflect.Value) {
	join := func(k string) string {
		if key == "" {
			return k
		}
		return key + "." + k
	}
	switch v.Kind() {
	case reflect.String:
		if m := placeholderPattern.FindString(v.String()); m != "" {
			ps.Add(key, "still holds the placeholder %q: replace it with the cluster's value", strings.TrimLeft(m, "\"' =:/"))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			findPlaceholders(ps, key, v.Elem())
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			findPlaceholders(ps, join(name), v.Field(i))
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			findPlaceholders(ps, fmt.Sprintf("%s[%d]", key, i), v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			findPlaceholders(ps, join(k.String()), k)
			findPlaceholders(ps, join(k.String()), v.MapIndex(k))
		}
	}
}
