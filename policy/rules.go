package policy

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/components"
	"minimax-m3/config"
)

// Violation is a rule a plan breaks, at one resource.
type Violation struct {
	Rule     string
	Resource string // the Kubernetes object, or the Pulumi resource
	Message  string
}

func (v Violation) String() string { return fmt.Sprintf("[%s] %s: %s", v.Rule, v.Resource, v.Message) }

// Rule is one policy.
type Rule struct {
	Name        string
	Description string
	// Scope says what the rule reads: ScopeObject one object as it will be, ScopeStack every
	// object of the stack as it will be, ScopeChange what a step does to the live object
	// (replacing, deleting), which only a preview's steps show.
	Scope Scope
	check func(Plan) []Violation
}

// Scope is what a rule needs to see.
type Scope int

const (
	// ScopeObject rules read one object as it will be.
	ScopeObject Scope = iota
	// ScopeStack rules read every object of the stack as it will be.
	ScopeStack
	// ScopeChange rules read what a step does to the live object.
	ScopeChange
)

// Check runs the rule alone.
func (r Rule) Check(p Plan) []Violation {
	vs := r.check(p)
	for i := range vs {
		vs[i].Rule = r.Name
	}
	return vs
}

// Rules are the policies, in the order they are reported.
var Rules = []Rule{
	{"hf-token-from-secret", "the Hugging Face token reaches pods only through a Secret reference", ScopeObject, hfTokenFromSecret},
	{"gpu-request-equals-limit", "every GPU container requests and limits the same GPU count", ScopeObject, gpuRequestEqualsLimit},
	{"one-compute-domain-channel", "all workers of a graph claim the same ComputeDomain channel", ScopeStack, oneComputeDomainChannel},
	{"pinned-images", "images are pinned: a tag that is not latest, or a digest", ScopeObject, pinnedImages},
	{"allowed-registries", "images come only from the registries the site allows (the recipe's by default)", ScopeObject, allowedRegistries},
	{"synthetic-only-for-benchmark", "synthetic speculative acceptance only on a graph labelled for benchmarking (benchmark.enabled)", ScopeObject, syntheticOnlyForBenchmark},
	{"pod-security", "every pod passes Pod Security baseline (the workers' three capabilities and root excepted) and the fleet's rules: only the program's volume types, no root or privilege escalation elsewhere, no ServiceAccount or node of its own, no priority class the site did not list, none of the runtime's or the operator's variables", ScopeObject, podSecurity},
	{"reads-own-objects", "a pod reads only the stack's own Secrets and ConfigMaps (env, envFrom, volumes): not another stack's in a shared namespace", ScopeStack, readsOwnObjects},
	{"monitors-own-namespace", "a PodMonitor or ServiceMonitor scrapes its own namespace only: other teams' pods and metrics are theirs", ScopeObject, monitorsOwnNamespace},
	{"routes-own-backends", "an HTTPRoute sends traffic only to Services or InferencePools of its own namespace", ScopeObject, routesOwnBackends},
	{"keep-model-cache", "no change replaces or deletes the model cache claim", ScopeChange, keepKind("PersistentVolumeClaim", "the model cache claim holds the downloaded weights; replacing or deleting it loses them")},
	{"keep-namespace", "no change replaces or deletes the namespace", ScopeChange, keepKind("Namespace", "deleting a namespace deletes everything in it, the model cache claim included")},
	{"keep-adopted", "with adopt, no change replaces or deletes an object the stack took over", ScopeChange, keepAdopted},
}

// Check runs every rule and returns the violations, rule by rule.
func Check(p Plan) []Violation {
	var out []Violation
	seen := map[Violation]bool{} // a replacement is several steps of one resource
	for _, r := range Rules {
		for _, v := range r.Check(p) {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// GPU is the extended resource of an NVIDIA GPU.
const GPU corev1.ResourceName = "nvidia.com/gpu"

// pod is one pod template of an object in the plan.
type pod struct {
	step  Step
	where string // "", or the graph component
	// worker is a graph component of a worker type (config.WorkerComponentTypes).
	worker bool
	meta   *metav1.ObjectMeta
	spec   *corev1.PodSpec
	err    error
}

func (p pod) resource() string {
	if p.where == "" {
		return p.step.objectName()
	}
	return p.step.objectName() + " component " + p.where
}

// pods are the pod templates the plan creates or keeps: the Job's, each graph component's, and
// those of any other workload.
func pods(p Plan) []pod {
	var out []pod
	for _, s := range p.Steps {
		if s.New == nil {
			continue
		}
		switch s.Kind() {
		case "DynamoGraphDeployment":
			comps, _ := at(s.New, "spec", "components").([]any)
			for _, c := range comps {
				cm, _ := c.(map[string]any)
				name, _ := cm["name"].(string)
				typ, _ := cm["type"].(string)
				if t := at(cm, "podTemplate", "spec"); t != nil {
					spec, err := podSpec(t)
					out = append(out, pod{s, name, slices.Contains(config.WorkerComponentTypes, typ), podMeta(at(cm, "podTemplate", "metadata")), spec, err})
				}
			}
		case "Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
			spec, err := podSpec(at(s.New, "spec", "template", "spec"))
			out = append(out, pod{s, "", false, podMeta(at(s.New, "spec", "template", "metadata")), spec, err})
		case "Pod":
			spec, err := podSpec(at(s.New, "spec"))
			out = append(out, pod{s, "", false, podMeta(at(s.New, "metadata")), spec, err})
		}
	}
	return out
}

// podMeta reads a pod template's metadata; what cannot be read is left empty (the Pod Security
// checks read only its annotations, and the spec's own read reports a broken template).
func podMeta(v any) *metav1.ObjectMeta {
	var meta metav1.ObjectMeta
	if b, err := json.Marshal(v); err == nil {
		_ = json.Unmarshal(b, &meta)
	}
	return &meta
}

func podSpec(v any) (*corev1.PodSpec, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var spec corev1.PodSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("cannot read the pod template: %w", err)
	}
	return &spec, nil
}

// eachContainer calls f for every container of every pod; a pod that cannot be read is itself a
// violation of the rule asking, since the rule cannot vouch for it.
func eachContainer(p Plan, f func(pod, corev1.Container) []Violation) []Violation {
	var out []Violation
	for _, pd := range pods(p) {
		if pd.err != nil {
			out = append(out, Violation{Resource: pd.resource(), Message: pd.err.Error()})
			continue
		}
		for _, c := range append(append([]corev1.Container{}, pd.spec.InitContainers...), pd.spec.Containers...) {
			out = append(out, f(pd, c)...)
		}
	}
	return out
}

// tokenVariables are the environment variables the Hugging Face libraries read a token from.
var tokenVariables = map[string]bool{"HF_TOKEN": true, "HUGGING_FACE_HUB_TOKEN": true, "HUGGINGFACE_HUB_TOKEN": true, "HUGGINGFACE_TOKEN": true}

// tokenPattern is a Hugging Face access token.
var tokenPattern = regexp.MustCompile(`hf_[A-Za-z0-9]{16,}`)

func hfTokenFromSecret(p Plan) []Violation {
	out := eachContainer(p, func(pd pod, c corev1.Container) []Violation {
		var vs []Violation
		where := pd.resource() + " container " + c.Name
		for _, e := range c.Env {
			switch {
			case tokenVariables[e.Name] && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil):
				vs = append(vs, Violation{Resource: where, Message: fmt.Sprintf("env %s must come from a Secret (valueFrom.secretKeyRef)", e.Name)})
			case tokenPattern.MatchString(e.Value):
				vs = append(vs, Violation{Resource: where, Message: fmt.Sprintf("env %s holds a Hugging Face token in plain text", e.Name)})
			}
		}
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			if tokenPattern.MatchString(a) {
				vs = append(vs, Violation{Resource: where, Message: "a command-line argument holds a Hugging Face token in plain text"})
			}
		}
		return vs
	})
	// Anything that is not a Secret must not hold a token either (a ConfigMap, an annotation).
	for _, s := range p.Steps {
		if s.New == nil || s.Kind() == "" || s.Kind() == "Secret" {
			continue
		}
		b, _ := json.Marshal(s.New)
		if tokenPattern.Match(b) {
			out = append(out, Violation{Resource: s.objectName(), Message: "holds a Hugging Face token in plain text; only a Secret may"})
		}
	}
	return out
}

func podSecurity(p Plan) []Violation {
	var out []Violation
	for _, pd := range pods(p) {
		if pd.err != nil {
			out = append(out, Violation{Resource: pd.resource(), Message: pd.err.Error()})
			continue
		}
		profile := config.PodProfile{Worker: pd.worker, PriorityClasses: p.PriorityClasses}
		for _, problem := range config.PodSecurity(pd.meta, pd.spec, profile) {
			out = append(out, Violation{Resource: pd.resource(), Message: problem})
		}
	}
	return out
}

// readsOwnObjects checks every pod's Secret and ConfigMap reads against the Secrets and ConfigMaps
// the plan writes, and the Secret a Job's Hugging Face token variables name (a Secret the user
// brought, huggingFace.existingSecret).
func readsOwnObjects(p Plan) []Violation {
	secrets, configMaps := []string{}, []string{}
	for _, s := range p.Steps {
		if s.New == nil {
			continue
		}
		name, _ := at(s.New, "metadata", "name").(string)
		switch s.Kind() {
		case "Secret":
			secrets = append(secrets, name)
		case "ConfigMap":
			configMaps = append(configMaps, name)
		}
	}
	pds := pods(p)
	for _, pd := range pds {
		// The token's Secret is the one the program's Jobs (the download) read it from: a token
		// variable elsewhere names no Secret the stack owns.
		if pd.err != nil || pd.step.Kind() != "Job" {
			continue
		}
		for _, c := range append(append([]corev1.Container{}, pd.spec.InitContainers...), pd.spec.Containers...) {
			for _, e := range c.Env {
				if tokenVariables[e.Name] && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					secrets = append(secrets, e.ValueFrom.SecretKeyRef.Name)
				}
			}
		}
	}
	var out []Violation
	for _, pd := range pds {
		if pd.err != nil {
			out = append(out, Violation{Resource: pd.resource(), Message: pd.err.Error()})
			continue
		}
		for _, problem := range config.Reads(pd.spec, secrets, configMaps) {
			out = append(out, Violation{Resource: pd.resource(), Message: problem})
		}
	}
	return out
}

func gpuRequestEqualsLimit(p Plan) []Violation {
	return eachContainer(p, func(pd pod, c corev1.Container) []Violation {
		req, hasReq := c.Resources.Requests[GPU]
		lim, hasLim := c.Resources.Limits[GPU]
		where := pd.resource() + " container " + c.Name
		switch {
		case !hasReq && !hasLim:
			return nil
		case !hasLim:
			return []Violation{{Resource: where, Message: fmt.Sprintf("requests %s %s with no limit", req.String(), GPU)}}
		case !hasReq:
			// Kubernetes defaults the request to the limit; say it, so the spec reads as it runs.
			return []Violation{{Resource: where, Message: fmt.Sprintf("limits %s %s with no request", lim.String(), GPU)}}
		case req.Cmp(lim) != 0:
			return []Violation{{Resource: where, Message: fmt.Sprintf("requests %s but limits %s %s", req.String(), lim.String(), GPU)}}
		}
		return nil
	})
}

func usesGPU(c corev1.Container) bool {
	q := c.Resources.Limits[GPU]
	r := c.Resources.Requests[GPU]
	return q.Cmp(resource.Quantity{}) > 0 || r.Cmp(resource.Quantity{}) > 0
}

func oneComputeDomainChannel(p Plan) []Violation {
	// The channel claim templates of the ComputeDomains in the plan.
	channels := map[string]bool{}
	for _, s := range p.Steps {
		if s.New != nil && s.Kind() == "ComputeDomain" {
			if n, _ := at(s.New, "spec", "channel", "resourceClaimTemplate", "name").(string); n != "" {
				channels[n] = true
			}
		}
	}
	var out []Violation
	byGraph := map[string]map[string][]string{} // graph -> template -> components
	for _, pd := range pods(p) {
		if pd.step.Kind() != "DynamoGraphDeployment" || pd.err != nil {
			continue
		}
		gpuContainers := 0
		for _, c := range pd.spec.Containers {
			if usesGPU(c) {
				gpuContainers++
			}
		}
		if gpuContainers == 0 {
			continue // the frontend
		}
		claims := map[string]string{} // pod claim name -> template
		for _, rc := range pd.spec.ResourceClaims {
			if rc.ResourceClaimTemplateName != nil {
				claims[rc.Name] = *rc.ResourceClaimTemplateName
			}
		}
		templates := map[string]bool{}
		for _, c := range pd.spec.Containers {
			if !usesGPU(c) {
				continue
			}
			found := false
			for _, cl := range c.Resources.Claims {
				if t, ok := claims[cl.Name]; ok {
					templates[t] = true
					found = true
				}
			}
			if !found {
				out = append(out, Violation{Resource: pd.resource() + " container " + c.Name, Message: "uses GPUs but claims no ComputeDomain channel (resources.claims naming a resourceClaimTemplate)"})
			}
		}
		graph := pd.step.objectName()
		if byGraph[graph] == nil {
			byGraph[graph] = map[string][]string{}
		}
		for t := range templates {
			byGraph[graph][t] = append(byGraph[graph][t], pd.where)
			if len(channels) > 0 && !channels[t] {
				out = append(out, Violation{Resource: pd.resource(), Message: fmt.Sprintf("claims channel template %q, which no ComputeDomain of the stack provides", t)})
			}
		}
	}
	graphs := make([]string, 0, len(byGraph))
	for g := range byGraph {
		graphs = append(graphs, g)
	}
	sort.Strings(graphs)
	for _, g := range graphs {
		if len(byGraph[g]) > 1 {
			var parts []string
			for t, comps := range byGraph[g] {
				parts = append(parts, fmt.Sprintf("%s by %s", t, strings.Join(comps, ", ")))
			}
			sort.Strings(parts)
			out = append(out, Violation{Resource: g, Message: "workers claim different ComputeDomain channels (" + strings.Join(parts, "; ") + "): NVLink only spans one domain"})
		}
	}
	return out
}

func pinnedImages(p Plan) []Violation {
	return eachContainer(p, func(pd pod, c corev1.Container) []Violation {
		where := pd.resource() + " container " + c.Name
		ref, err := reference.ParseNormalizedNamed(c.Image)
		if err != nil {
			return []Violation{{Resource: where, Message: fmt.Sprintf("image %q: %v", c.Image, err)}}
		}
		if _, ok := ref.(reference.Digested); ok {
			return nil
		}
		tagged, ok := ref.(reference.Tagged)
		switch {
		case !ok:
			return []Violation{{Resource: where, Message: fmt.Sprintf("image %q has no tag or digest (it means latest)", c.Image)}}
		case tagged.Tag() == "latest":
			return []Violation{{Resource: where, Message: fmt.Sprintf("image %q is not pinned: use a version tag or a digest", c.Image)}}
		}
		return nil
	})
}

func allowedRegistries(p Plan) []Violation {
	allowed := &config.Config{ImageRegistries: p.ImageRegistries}
	if len(allowed.ImageRegistries) == 0 {
		allowed.ImageRegistries = config.DefaultImageRegistries
	}
	return eachContainer(p, func(pd pod, c corev1.Container) []Violation {
		if allowed.RegistryAllowed(c.Image) {
			return nil
		}
		return []Violation{{Resource: pd.resource() + " container " + c.Name,
			Message: fmt.Sprintf("image %q is not from a registry the site allows (%s)", c.Image, strings.Join(allowed.ImageRegistries, ", "))}}
	})
}

// syntheticKey is the ConfigMap key holding the synthetic-acceptance speculative config.
const syntheticKey = "speculative-config-synthetic"

func syntheticOnlyForBenchmark(p Plan) []Violation {
	var out []Violation
	for _, pd := range pods(p) {
		if pd.step.Kind() != "DynamoGraphDeployment" || pd.err != nil {
			continue
		}
		if labels, _ := at(pd.step.New, "metadata", "labels").(map[string]any); labels[components.BenchmarkLabel] == "true" {
			continue
		}
		for _, c := range pd.spec.Containers {
			for _, e := range c.Env {
				synthetic := strings.Contains(e.Value, `"synthetic"`) ||
					(e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Key == syntheticKey)
				if synthetic {
					out = append(out, Violation{Resource: pd.resource() + " container " + c.Name,
						Message: fmt.Sprintf("env %s selects synthetic speculative acceptance (responses are not the model's) on a graph without the %s=true label: set benchmark.enabled on a benchmark stack, or speculativeDecoding.mode=real", e.Name, components.BenchmarkLabel)})
				}
			}
		}
	}
	return out
}

// monitorsOwnNamespace refuses a PodMonitor whose namespaceSelector reaches past its own
// namespace: `any`, or a name other than its own (prometheus-operator's default, no selector, is its
// own namespace).
func monitorsOwnNamespace(p Plan) []Violation {
	var out []Violation
	for _, s := range p.Steps {
		if k := s.Kind(); (k != "PodMonitor" && k != "ServiceMonitor") || s.New == nil {
			continue
		}
		own, _ := at(s.New, "metadata", "namespace").(string)
		sel, _ := at(s.New, "spec", "namespaceSelector").(map[string]any)
		if all, _ := sel["any"].(bool); all {
			out = append(out, Violation{Resource: s.objectName(), Message: "namespaceSelector.any scrapes pods of every namespace: select its own, " + own})
		}
		names, _ := sel["matchNames"].([]any)
		for _, n := range names {
			if n != own {
				out = append(out, Violation{Resource: s.objectName(), Message: fmt.Sprintf("namespaceSelector.matchNames names %v, not its own namespace %s", n, own)})
			}
		}
	}
	return out
}

// routeBackendKinds are what a route may send traffic to, as group/kind: a Service (the core
// group, which Gateway API writes as "" and some write as "core"), or the Inference Extension's
// InferencePool the operator makes for the graph's endpoint picker.
var routeBackendKinds = map[string]bool{"/Service": true, "core/Service": true, "inference.networking.k8s.io/InferencePool": true}

// routesOwnBackends refuses an HTTPRoute whose backendRefs reach past its own namespace, or to
// anything but a Service or an InferencePool: a route of this stack on the site's Gateway would otherwise carry the
// stack's hostname to another team's pods.
func routesOwnBackends(p Plan) []Violation {
	var out []Violation
	for _, s := range p.Steps {
		if s.Kind() != "HTTPRoute" || s.New == nil {
			continue
		}
		own, _ := at(s.New, "metadata", "namespace").(string)
		rules, _ := at(s.New, "spec", "rules").([]any)
		check := func(where string, ref map[string]any) {
			ns, _ := ref["namespace"].(string)
			group, _ := ref["group"].(string)
			kind, _ := ref["kind"].(string)
			if ns != "" && ns != own {
				out = append(out, Violation{Resource: s.objectName(), Message: fmt.Sprintf("%s sends traffic to namespace %s, not its own %s", where, ns, own)})
			}
			if !routeBackendKinds[group+"/"+cmp.Or(kind, "Service")] {
				out = append(out, Violation{Resource: s.objectName(), Message: fmt.Sprintf("%s sends traffic to a %s, not a Service or an InferencePool", where, strings.TrimPrefix(group+"/"+cmp.Or(kind, "Service"), "/"))})
			}
		}
		// A request mirror is traffic too, on the rule or on one backend.
		mirrors := func(where string, filters []any) {
			for k, f := range filters {
				fm, _ := f.(map[string]any)
				if ref, ok := at(fm, "requestMirror", "backendRef").(map[string]any); ok {
					check(fmt.Sprintf("%s.filters[%d].requestMirror.backendRef", where, k), ref)
				}
			}
		}
		for i, r := range rules {
			rm, _ := r.(map[string]any)
			filters, _ := rm["filters"].([]any)
			mirrors(fmt.Sprintf("rules[%d]", i), filters)
			refs, _ := rm["backendRefs"].([]any)
			for j, ref := range refs {
				m, _ := ref.(map[string]any)
				where := fmt.Sprintf("rules[%d].backendRefs[%d]", i, j)
				check(where, m)
				bf, _ := m["filters"].([]any)
				mirrors(where, bf)
			}
		}
	}
	return out
}

// keepKind forbids replacing or deleting objects of one kind.
func keepKind(kind, why string) func(Plan) []Violation {
	return func(p Plan) []Violation {
		var out []Violation
		for _, s := range p.Steps {
			if s.Kind() != kind {
				continue
			}
			if s.Replaces() || s.Deletes() {
				out = append(out, Violation{Resource: s.objectName(), Message: fmt.Sprintf("this change would %s it (%s): %s", verb(s), strings.Join(s.Diffs, ", "), why)})
			}
		}
		return out
	}
}

func keepAdopted(p Plan) []Violation {
	if !p.Adopted {
		return nil
	}
	var out []Violation
	for _, s := range p.Steps {
		if s.Kind() == "" || s.Kind() == "PersistentVolumeClaim" || s.Kind() == "Namespace" {
			continue // not an object, or reported by its own rule
		}
		if s.Old != nil && (s.Replaces() || s.Deletes()) {
			out = append(out, Violation{Resource: s.objectName(), Message: fmt.Sprintf("this change would %s an object the stack adopted (adopt=true)", verb(s))})
		}
	}
	return out
}

func verb(s Step) string {
	if s.Deletes() {
		return "delete"
	}
	return "replace"
}
