package config

import (
	"path"
	"reflect"
	"regexp"
)

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ModelConfig pins the served model and its EAGLE3 draft.
type ModelConfig struct {
	Name     string `json:"name"`
	Revision string `json:"revision"`
	// ServedModelName is the name clients request; empty follows Name.
	ServedModelName string      `json:"servedModelName"`
	Draft           DraftConfig `json:"draft"`
}

// DraftConfig pins the EAGLE3 draft model used for speculative decoding.
type DraftConfig struct {
	Name     string `json:"name"`
	Revision string `json:"revision"`
}

func (m ModelConfig) validate(v validator, key string) {
	v.nonEmpty(key+".name", m.Name)
	v.nonEmpty(key+".draft.name", m.Draft.Name)
	v.commit(key+".revision", m.Revision)
	v.commit(key+".draft.revision", m.Draft.Revision)
}

func (v validator) commit(key, s string) {
	if !commitPattern.MatchString(s) {
		v.add(key, "%q is not a pinned commit (40 lowercase hex characters)", s)
	}
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

func (s SpeculativeConfig) validate(v validator, key string) {
	v.nonEmpty(key+".method", s.Method)
	v.atLeast(key+".numSpeculativeTokens", s.NumSpeculativeTokens, 1)
	v.nonEmpty(key+".attentionBackend", s.AttentionBackend)
	v.choice(key+".mode", reflect.TypeFor[SpeculativeConfig](), "mode", string(s.Mode))
	// The accepted length counts the bonus token: more than 1, at most every draft token plus the
	// bonus.
	if max := float64(s.NumSpeculativeTokens + 1); s.SyntheticAcceptanceLength <= 1 || s.SyntheticAcceptanceLength > max {
		v.add(key+".syntheticAcceptanceLength", "%g is outside (1, %g] (numSpeculativeTokens+1)", s.SyntheticAcceptanceLength, max)
	}
}

// ModelCacheConfig is the PVC the model is downloaded to and served from.
type ModelCacheConfig struct {
	ClaimName string `json:"claimName"`
	// Create makes the stack create the claim; false uses an existing, populated one (for example
	// the claim another stack in the namespace owns).
	Create       bool   `json:"create"`
	StorageClass string `json:"storageClass"`
	Size         string `json:"size"`
	AccessMode   string `json:"accessMode"`
	MountPath    string `json:"mountPath"`
	// DeleteOnDestroy lets `pulumi destroy` delete a claim the stack created. Off by default: the
	// cache is hours of download.
	DeleteOnDestroy bool `json:"deleteOnDestroy"`
}

func (m ModelCacheConfig) validate(v validator, key string) {
	v.dns1123Subdomain(key+".claimName", m.ClaimName)
	if m.Create {
		if m.StorageClass != "" {
			v.dns1123Subdomain(key+".storageClass", m.StorageClass)
		}
		v.positiveQuantity(key+".size", m.Size)
		v.choice(key+".accessMode", reflect.TypeFor[ModelCacheConfig](), "accessMode", m.AccessMode)
	}
	if !path.IsAbs(m.MountPath) || path.Clean(m.MountPath) != m.MountPath {
		v.add(key+".mountPath", "%q is not a clean absolute path", m.MountPath)
	}
}

// pipReleasePattern is a PEP 440 public release as `pip install name==<release>` takes it.
var pipReleasePattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$`)

// ModelDownloadConfig is the Job that fills the cache with the pinned model and draft.
type ModelDownloadConfig struct {
	// Enabled runs the download in this stack. Only the stack that owns the cache downloads; a
	// second stack on the same cache turns it off.
	Enabled bool   `json:"enabled"`
	JobName string `json:"jobName"`
	Image   string `json:"image"`
	// HubClientVersion pins the huggingface_hub release the Job installs.
	HubClientVersion string `json:"hubClientVersion"`
	// Timeout bounds one download attempt (Go duration): the pod's activeDeadlineSeconds. The
	// Job's own deadline covers every attempt (BackoffLimit retries) and the back-off between
	// them, so Kubernetes fails a stuck Job itself and `up` reports DeadlineExceeded at once.
	Timeout      string `json:"timeout"`
	BackoffLimit int    `json:"backoffLimit"`
	// WaitForCompletion makes `up` wait for the download before creating the graph. Turn it off
	// only where no Job can run (a local API server without nodes) or a GitOps tool owns rollout.
	WaitForCompletion bool `json:"waitForCompletion"`
	// Resources of the download container; empty leaves them to the namespace defaults.
	Resources  Resources  `json:"resources"`
	Scheduling Scheduling `json:"scheduling"`
}

func (d ModelDownloadConfig) validate(v validator, key string) {
	if !d.Enabled {
		return
	}
	v.dns1123Label(key+".jobName", d.JobName)
	v.image(key+".image", d.Image)
	if !pipReleasePattern.MatchString(d.HubClientVersion) {
		// The Job runs `pip install huggingface_hub==<version>`: pip takes a PEP 440 release there,
		// and nothing else belongs in the Job's shell command.
		v.add(key+".hubClientVersion", "%q is not a huggingface_hub release pip installs, such as 1.16.4 (PEP 440: N[.N]..., optionally aN, bN or rcN, .postN, .devN)", d.HubClientVersion)
	}
	v.duration(key+".timeout", d.Timeout)
	if d.BackoffLimit < 0 {
		v.add(key+".backoffLimit", "must not be negative, got %d", d.BackoffLimit)
	}
	d.Resources.validate(v, key+".resources")
	d.Scheduling.validate(v, key+".scheduling")
}
