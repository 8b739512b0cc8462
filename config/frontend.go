package config

// FrontendConfig is the OpenAI-compatible HTTP frontend and KV-aware router. It listens on
// FrontendPort: the Dynamo operator's frontend Service uses that port whatever the frontend is
// told, so the port is not configurable.
type FrontendConfig struct {
	Replicas   int          `json:"replicas"`
	Resources  Resources    `json:"resources"`
	Scheduling Scheduling   `json:"scheduling"`
	Router     RouterConfig `json:"router"`
	// LoadTokenizer makes the frontend load the model's tokenizer itself (--model-name <model.name>
	// --trust-remote-code), as the disaggregated recipe does to route prefill and decode.
	LoadTokenizer  bool              `json:"loadTokenizer"`
	Env            []EnvVar          `json:"env"`
	ExtraArgs      []string          `json:"extraArgs"`
	ExtraEnv       []EnvVar          `json:"extraEnv"`
	PodAnnotations map[string]string `json:"podAnnotations"`
	// Rollout is how the operator replaces the frontend's pods on a change.
	Rollout Rollout `json:"rollout"`
	// PodTemplatePatch is applied to the frontend's pod template last.
	PodTemplatePatch PodTemplatePatch `json:"podTemplatePatch"`
	// ScalingAdapter hands the frontend's replicas to the graph's scaling adapter (an autoscaler);
	// Pulumi then stops writing them.
	ScalingAdapter bool `json:"scalingAdapter"`
}

// RouterConfig holds the frontend's router flags.
type RouterConfig struct {
	Mode              string `json:"mode"`
	KVEvents          bool   `json:"kvEvents"`
	TrackActiveBlocks bool   `json:"trackActiveBlocks"`
	TrackOutputBlocks bool   `json:"trackOutputBlocks"`
	KVCacheBlockSize  int    `json:"kvCacheBlockSize"`
}

func (f FrontendConfig) validate(v validator, key string, profile PodProfile) {
	v.atLeast(key+".replicas", f.Replicas, 1)
	v.nonEmpty(key+".router.mode", f.Router.Mode)
	v.atLeast(key+".router.kvCacheBlockSize", f.Router.KVCacheBlockSize, 1)
	f.Resources.validate(v, key+".resources")
	f.Scheduling.validate(v, key+".scheduling")
	v.annotations(key+".podAnnotations", f.PodAnnotations)
	operatorAnnotations(v, key+".podAnnotations", f.PodAnnotations, false)
	f.Rollout.validate(v, key+".rollout", f.Replicas, f.PodAnnotations)
	v.env(key, nil, f.Env, f.ExtraEnv)
	f.PodTemplatePatch.validate(v, key+".podTemplatePatch", profile)
}
