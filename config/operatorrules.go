package config

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What the Dynamo operator's admission webhook and its CRD's rules refuse in a component, checked
// here so that preview names the key instead of `up` failing at the webhook (internal/webhook/
// validation in the operator's source).
const (
	// BackendAnnotation picks vLLM's distributed executor; the CRD admits mp or ray, in any case.
	BackendAnnotation = "nvidia.com/vllm-distributed-executor-backend"
	// PowerLimitAnnotation caps a component's GPU power; the webhook wants a positive decimal
	// integer, and refuses it beside DRA claims (a worker's ComputeDomain channel).
	PowerLimitAnnotation = "dynamo.nvidia.com/gpu-power-limit"
	// MainContainer is the container the operator runs the component in.
	MainContainer = "main"
)

// operatorAnnotations checks a role's pod annotations against the webhook's rules; claimsDevices
// says the role's pods carry DRA resource claims (every worker: the ComputeDomain channel).
func operatorAnnotations(v validator, key string, annotations map[string]string, claimsDevices bool) {
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		val := annotations[k]
		switch k {
		case BackendAnnotation:
			if b := strings.ToLower(val); b != "mp" && b != "ray" {
				v.add(key+"."+k, "%q is not a backend the Dynamo operator admits: mp or ray", val)
			}
		case PowerLimitAnnotation:
			if claimsDevices {
				v.add(key+"."+k, "the Dynamo operator refuses a GPU power limit beside DRA claims, and every worker claims its ComputeDomain channel")
				continue
			}
			if n, err := strconv.Atoi(val); err != nil || n <= 0 {
				v.add(key+"."+k, "%q must be a positive decimal integer (watts)", val)
			}
		}
	}
}

// operatorTemplate checks a patched pod template the way the webhook and the CRD do: the main
// container is there with an image, and every other container and init container has one.
func operatorTemplate(v validator, key string, t corev1.PodTemplateSpec) {
	main := slices.IndexFunc(t.Spec.Containers, func(c corev1.Container) bool { return c.Name == MainContainer })
	if main < 0 {
		v.add(key, "removes the %q container, which the Dynamo operator runs the component in", MainContainer)
	} else if t.Spec.Containers[main].Image == "" {
		v.add(key, "leaves the %q container without an image", MainContainer)
	}
	for _, c := range t.Spec.Containers {
		if c.Name != MainContainer && c.Image == "" {
			v.add(key, "adds container %q without an image (the Dynamo operator's CRD refuses it)", c.Name)
		}
	}
	for _, c := range t.Spec.InitContainers {
		if c.Image == "" {
			v.add(key, "adds init container %q without an image (the Dynamo operator's CRD refuses it)", c.Name)
		}
	}
}
