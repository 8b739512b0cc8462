package manifest

import (
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	eppv1alpha1 "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"

	"minimax-m3/config"
)

// With exposure.backend inferencePool the site's gateway routes through the Gateway API Inference
// Extension: the graph gains an endpoint picker (a component of type epp, for which the Dynamo
// operator makes the InferencePool <graph>-pool selecting the graph's worker pods on port 8000),
// and every worker pod a frontend sidecar on that port, which serves the requests the picker
// sends to its worker. The frontend component stays: the smoke test, the benchmark and in-cluster
// clients keep using its Service.

const (
	// EndpointPickerName is the graph's endpoint picker component.
	EndpointPickerName = "Epp"
	// FrontendSidecarName is the container of each worker pod the operator makes a frontend of.
	FrontendSidecarName = "sidecar-frontend"
)

// endpointPickerComponent is the graph's epp component: Dynamo's endpoint picker, told the model,
// the router's KV block size and whether requests must go through prefill, with the model cache
// and the frontend's environment, where the frontend runs. The operator adds its arguments, ports,
// probes, configuration volume and ServiceAccount.
func endpointPickerComponent(c *config.Config) GraphComponent {
	p := c.Exposure.EndpointPicker
	optional := true
	spec := SitePodSpec(c.ImagePullSecrets, c.Frontend.Scheduling)
	spec.Containers = []corev1.Container{{
		Name:            MainContainer,
		Image:           p.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Env: append([]corev1.EnvVar{
			{Name: "DYN_KV_CACHE_BLOCK_SIZE", Value: strconv.Itoa(c.Frontend.Router.KVCacheBlockSize)},
			{Name: "DYN_MODEL_NAME", Value: c.ServedModelName()},
			{Name: "DYN_ENFORCE_DISAGG", Value: strconv.FormatBool(c.Profile == config.Disaggregated)},
			// The picker reads the model's tokenizer: from the cache, read-only, as the frontend's
			// environment keeps it off the hub; the token (by reference) if its client goes there.
			{Name: "HF_HOME", Value: c.ModelCache.MountPath},
			{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: c.HuggingFace.SecretName}, Key: "HF_TOKEN", Optional: &optional,
			}}},
		}, literalEnv(c.Frontend.Env, c.Frontend.ExtraEnv)...),
		Resources:    Resources(p.Resources, nil),
		VolumeMounts: []corev1.VolumeMount{{Name: CacheVolumeName, MountPath: c.ModelCache.MountPath, ReadOnly: true}},
	}}
	// The cache claim is ReadWriteMany and the download Job mounts it on a CPU node, where the
	// picker runs too.
	spec.Volumes = []corev1.Volume{{
		Name:         CacheVolumeName,
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ModelCache.ClaimName, ReadOnly: true}},
	}}
	return GraphComponent{
		Name:                   EndpointPickerName,
		Type:                   "epp",
		RuntimeVersionOverride: c.RuntimeVersion,
		Replicas:               1, // the operator allows no other count
		EPPConfig:              &EPPConfig{Config: EndpointPickerConfig(c)},
		PodTemplate:            corev1.PodTemplateSpec{Spec: spec},
	}
}

// EndpointPickerConfig is the picker's plugin configuration, as Dynamo's own GAIE examples give it:
// a profile per role the request passes through (prefill then decode in disagg; one in agg), each
// keeping the pods of its role (by the component-type label), scoring them by Dynamo's KV-aware
// scorer and taking the best. The agg workers are of type worker, which the decode profile keeps.
func EndpointPickerConfig(c *config.Config) *eppv1alpha1.EndpointPickerConfig {
	one := 1
	filter := func(name, role string) eppv1alpha1.PluginSpec {
		params, _ := json.Marshal(map[string]any{"label": ComponentTypeLabel, "validValues": []string{role}, "allowsNoLabel": false}) // cannot fail: plain values
		return eppv1alpha1.PluginSpec{Name: name, Type: "label-filter", Parameters: params}
	}
	profile := func(name, filter, scorer string) eppv1alpha1.SchedulingProfile {
		return eppv1alpha1.SchedulingProfile{Name: name, Plugins: []eppv1alpha1.SchedulingPlugin{
			{PluginRef: filter, Weight: &one}, {PluginRef: scorer, Weight: &one}, {PluginRef: "picker", Weight: &one},
		}}
	}
	cfg := &eppv1alpha1.EndpointPickerConfig{Plugins: []eppv1alpha1.PluginSpec{{Type: "disagg-profile-handler"}}}
	if c.Profile == config.Disaggregated {
		cfg.Plugins = append(cfg.Plugins, filter("prefill-filter", "prefill"), filter("decode-filter", "decode"),
			eppv1alpha1.PluginSpec{Name: "picker", Type: "max-score-picker"},
			eppv1alpha1.PluginSpec{Name: "dyn-prefill", Type: "dyn-prefill-scorer"},
			eppv1alpha1.PluginSpec{Name: "dyn-decode", Type: "dyn-decode-scorer"})
		cfg.SchedulingProfiles = []eppv1alpha1.SchedulingProfile{
			profile("prefill", "prefill-filter", "dyn-prefill"), profile("decode", "decode-filter", "dyn-decode"),
		}
		return cfg
	}
	cfg.Plugins = append(cfg.Plugins, filter("decode-filter", "worker"),
		eppv1alpha1.PluginSpec{Name: "picker", Type: "max-score-picker"},
		eppv1alpha1.PluginSpec{Name: "dyn-decode", Type: "dyn-decode-scorer"})
	cfg.SchedulingProfiles = []eppv1alpha1.SchedulingProfile{profile("decode", "decode-filter", "dyn-decode")}
	return cfg
}

// frontendSidecar is the container of a worker pod the pool's requests reach: a frontend in
// direct mode (the picker has chosen the worker), with the frontend's environment (offline from
// the hub, as the recipe's frontend is) and its tokenizer read from the cache the operator mounts
// into it as into the worker. The operator adds its port (8000), probes and Dynamo's environment.
func frontendSidecar(c *config.Config) corev1.Container {
	return corev1.Container{
		Name:            FrontendSidecarName,
		Image:           c.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"python3"},
		Args:            []string{"-m", "dynamo.frontend", "--router-mode", "direct"},
		Env:             append([]corev1.EnvVar{{Name: "HF_HOME", Value: c.ModelCache.MountPath}}, literalEnv(c.Frontend.Env, c.Frontend.ExtraEnv)...),
		Resources:       Resources(c.Exposure.FrontendSidecar.Resources, nil),
	}
}
