package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Choice is a closed choice of the config: a field whose value is one of a fixed set, as the tool
// that reads it (Kubernetes, the Dynamo operator, vLLM, the Gateway) refuses any other at start.
// One table (Choices) serves both the validation, which refuses another value at its key before
// anything runs, and the schemas, which list the set as the field's enum (the stack files' JSON
// Schema and the package schema's enum types).
type Choice struct {
	// Name is the choice's enum type in the package schema.
	Name string
	// Owner is the config struct type the field belongs to; Field its JSON name.
	Owner reflect.Type
	Field string
	// Values are the choices, in the order the docs give them.
	Values []string
	// Unset says the field may also be left empty (""), which takes the default that the field's
	// description names.
	Unset bool
	// Why is what refuses another value, for the error.
	Why string
}

// Choices is every closed choice of the config.
var Choices = []Choice{
	{Name: "Profile", Owner: reflect.TypeFor[Config](), Field: "profile", Values: []string{string(Aggregated), string(Disaggregated)},
		Why: "the program's two serving profiles"},
	{Name: "PodSecurityLevel", Owner: reflect.TypeFor[NamespaceConfig](), Field: "podSecurity", Values: []string{PodSecurityBaseline, PodSecurityPrivileged}, Unset: true,
		Why: "the Pod Security levels a stack's pods can run under (restricted forbids what the workers need)"},
	{Name: "RestartStrategy", Owner: reflect.TypeFor[RestartConfig](), Field: "strategy", Values: []string{"Sequential", "Parallel"}, Unset: true,
		Why: "the Dynamo operator's restart strategies"},
	{Name: "ExposureScheme", Owner: reflect.TypeFor[ExposureConfig](), Field: "scheme", Values: []string{"https", "http"},
		Why: "the schemes a Gateway listener serves"},
	{Name: "ExposureBackend", Owner: reflect.TypeFor[ExposureConfig](), Field: "backend", Values: []string{BackendFrontend, BackendInferencePool},
		Why: "what the route sends to"},
	{Name: "SpeculativeMode", Owner: reflect.TypeFor[SpeculativeConfig](), Field: "mode", Values: []string{string(SpeculativeReal), string(SpeculativeSynthetic)},
		Why: "the speculative decoding configurations the workers read"},
	{Name: "TaintEffect", Owner: reflect.TypeFor[Toleration](), Field: "effect", Values: []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, Unset: true,
		Why: "Kubernetes' taint effects (empty tolerates every effect)"},
	{Name: "TolerationOperator", Owner: reflect.TypeFor[Toleration](), Field: "operator", Values: []string{"Equal", "Exists"}, Unset: true,
		Why: "Kubernetes' toleration operators (empty is Equal)"},
	{Name: "RolloutStrategy", Owner: reflect.TypeFor[Rollout](), Field: "strategy", Values: []string{RollingUpdate, Recreate, OperatorDefault},
		Why: "the rollouts the Dynamo operator runs"},
	{Name: "KVCacheDtype", Owner: reflect.TypeFor[VLLMConfig](), Field: "kvCacheDtype", Values: []string{"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"},
		Why: "vLLM's --kv-cache-dtype choices (vllm/config/cache.py: CacheDType)"},
	{Name: "MMEncoderTPMode", Owner: reflect.TypeFor[VLLMConfig](), Field: "mmEncoderTpMode", Values: []string{"weights", "data"}, Unset: true,
		Why: "vLLM's --mm-encoder-tp-mode choices"},
	{Name: "AccessMode", Owner: reflect.TypeFor[ModelCacheConfig](), Field: "accessMode", Values: []string{"ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod"},
		Why: "Kubernetes' volume access modes (workers on several nodes need ReadWriteMany)"},
}

// choiceOf is the table's choice for a field; a field not in the table is the program's error.
func choiceOf(owner reflect.Type, field string) Choice {
	for _, c := range Choices {
		if c.Owner == owner && c.Field == field {
			return c
		}
	}
	panic(fmt.Sprintf("config: %s.%s is not in Choices", owner.Name(), field))
}

// choice refuses a value of owner's field that is not one of its choices, at key.
func (v validator) choice(key string, owner reflect.Type, field, value string) {
	c := choiceOf(owner, field)
	if value == "" && c.Unset || slices.Contains(c.Values, value) {
		return
	}
	v.add(key, "%q is not one of %s (%s)", value, strings.Join(c.Values, ", "), c.Why)
}
