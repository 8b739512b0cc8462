package manifest

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"minimax-m3/config"
)

// Names the graph's pods share with the ComputeDomain claim chain and the model cache volume.
const (
	channelClaimName = "compute-domain-channel"
	CacheVolumeName  = "shared-model-cache"
	MainContainer    = "main"
	// systemPort is the named port the Dynamo operator exposes for worker health.
	systemPort = "system"
)

// SitePodSpec is what a site adds to every pod of the stack, the graph's and the download Job's
// alike: image pull secrets (the starter's registry-credentials Component) and scheduling (its
// scheduling Component: node selector, tolerations, required node labels, scheduler, runtime and
// priority class).
func SitePodSpec(pullSecrets []string, s config.Scheduling) corev1.PodSpec {
	spec := corev1.PodSpec{
		NodeSelector:      copyMap(s.NodeSelector),
		SchedulerName:     s.SchedulerName,
		PriorityClassName: s.PriorityClassName,
	}
	for _, name := range pullSecrets {
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	if s.RuntimeClassName != "" {
		spec.RuntimeClassName = &s.RuntimeClassName
	}
	for _, t := range s.Tolerations {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
			Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect),
		})
	}
	if len(s.RequiredNodeLabels) > 0 {
		var reqs []corev1.NodeSelectorRequirement
		for _, k := range slices.Sorted(maps.Keys(s.RequiredNodeLabels)) {
			reqs = append(reqs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: s.RequiredNodeLabels[k]})
		}
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}},
			},
		}}
	}
	return spec
}

// requireNodeLabel adds a required node affinity to one value of a label: to every term there is
// (terms are alternatives, a term's expressions all hold), or as the one term.
func requireNodeLabel(spec *corev1.PodSpec, key, value string) {
	req := corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, req)
	}
}

// resources turns configured requests and limits into core/v1 ones, adding extras set identically
// in both (GPUs, RDMA, network resources) and the container's resource claims.
func Resources(r config.Resources, both map[string]string, claims ...string) corev1.ResourceRequirements {
	out := corev1.ResourceRequirements{Requests: quantities(r.Requests), Limits: quantities(r.Limits)}
	for k, v := range both {
		if out.Requests == nil {
			out.Requests = corev1.ResourceList{}
		}
		if out.Limits == nil {
			out.Limits = corev1.ResourceList{}
		}
		q := resource.MustParse(v) // validated
		out.Requests[corev1.ResourceName(k)], out.Limits[corev1.ResourceName(k)] = q, q
	}
	for _, c := range claims {
		out.Claims = append(out.Claims, corev1.ResourceClaim{Name: c})
	}
	return out
}

func quantities(m map[string]string) corev1.ResourceList {
	if len(m) == 0 {
		return nil
	}
	out := corev1.ResourceList{}
	for k, v := range m {
		out[corev1.ResourceName(k)] = resource.MustParse(v) // validated
	}
	return out
}

// Probes the Dynamo operator gives a worker; a configured probe replaces one whole, so the fields
// it leaves unset are taken from these.
var operatorWorkerProbes = map[string]corev1.Probe{
	"startup":   {ProbeHandler: httpGet("/live"), PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 720},
	"liveness":  {ProbeHandler: httpGet("/live"), PeriodSeconds: 5, TimeoutSeconds: 4, FailureThreshold: 1},
	"readiness": {ProbeHandler: httpGet("/health"), PeriodSeconds: 10, TimeoutSeconds: 4, FailureThreshold: 3},
}

func httpGet(path string) corev1.ProbeHandler {
	return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(systemPort)}}
}

// probe builds a complete probe from a configured override; nil keeps the operator's.
func probe(kind string, p *config.Probe) *corev1.Probe {
	if p == nil {
		return nil
	}
	out := operatorWorkerProbes[kind]
	out.ProbeHandler = httpGet(out.HTTPGet.Path)
	if p.Path != "" {
		out.HTTPGet.Path = p.Path
	}
	for _, f := range []struct {
		dst *int32
		v   int
	}{{&out.InitialDelaySeconds, p.InitialDelaySeconds}, {&out.PeriodSeconds, p.PeriodSeconds}, {&out.TimeoutSeconds, p.TimeoutSeconds}, {&out.FailureThreshold, p.FailureThreshold}} {
		if f.v > 0 {
			*f.dst = int32(f.v)
		}
	}
	return &out
}

func literalEnv(vars ...[]config.EnvVar) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, list := range vars {
		for _, v := range list {
			out = append(out, corev1.EnvVar{Name: v.Name, Value: v.Value})
		}
	}
	return out
}

func podMetadata(annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Annotations: copyMap(annotations)}
}

func copyMap[V any](m map[string]V) map[string]V {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
