package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Resources are container requests and limits as Kubernetes quantities.
type Resources struct {
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
}

func (r Resources) validate(v validator, key string) {
	limits := map[string]resource.Quantity{}
	for _, name := range slices.Sorted(maps.Keys(r.Limits)) {
		if q, ok := v.quantity(key+".limits."+name, r.Limits[name]); ok {
			limits[name] = q
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Requests)) {
		q, ok := v.quantity(key+".requests."+name, r.Requests[name])
		if limit, limited := limits[name]; ok && limited && q.Cmp(limit) > 0 {
			v.add(key+".requests."+name, "request %s is above its limit %s", r.Requests[name], r.Limits[name])
		}
	}
}

// EnvVar is a literal container environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
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
				v.add(ek+".name", "%q is not a valid variable name", e.Name)
				continue
			}
			if why := ReservedEnv(e.Name); why != "" {
				v.add(ek+".name", "%s may not be set: %s", e.Name, why)
			}
			if seen[e.Name] {
				v.add(ek+".name", "%s is already set (by the recipe, a derived setting or an earlier entry); change that value instead of adding it again", e.Name)
			}
			seen[e.Name] = true
		}
	}
}

// Toleration lets a role's pods onto tainted nodes.
type Toleration struct {
	Key      string `json:"key"`
	Operator string `json:"operator"`
	Value    string `json:"value"`
	Effect   string `json:"effect"`
}

// Scheduling is the starter's scheduling Component for one kind of pod: a graph role or the
// download Job.
type Scheduling struct {
	NodeSelector map[string]string `json:"nodeSelector"`
	Tolerations  []Toleration      `json:"tolerations"`
	// RequiredNodeLabels becomes a required node affinity: the node's label must be one of the values.
	RequiredNodeLabels map[string][]string `json:"requiredNodeLabels"`
	SchedulerName      string              `json:"schedulerName"`
	RuntimeClassName   string              `json:"runtimeClassName"`
	PriorityClassName  string              `json:"priorityClassName"`
}

func (s Scheduling) validate(v validator, key string) {
	for _, k := range slices.Sorted(maps.Keys(s.NodeSelector)) {
		v.qualifiedName(key+".nodeSelector."+k, k)
		v.errs(key+".nodeSelector."+k, s.NodeSelector[k], "label value", validation.IsValidLabelValue(s.NodeSelector[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(s.RequiredNodeLabels)) {
		v.qualifiedName(key+".requiredNodeLabels."+k, k)
		if len(s.RequiredNodeLabels[k]) == 0 {
			v.add(key+".requiredNodeLabels."+k, "needs at least one value")
		}
	}
	for i, t := range s.Tolerations {
		tk := fmt.Sprintf("%s.tolerations[%d]", key, i)
		v.choice(tk+".operator", reflect.TypeFor[Toleration](), "operator", t.Operator)
		if t.Operator == "Exists" && t.Value != "" {
			v.add(tk+".value", "must be empty with operator Exists")
		}
		v.choice(tk+".effect", reflect.TypeFor[Toleration](), "effect", t.Effect)
	}
	for name, s := range map[string]string{"schedulerName": s.SchedulerName, "runtimeClassName": s.RuntimeClassName, "priorityClassName": s.PriorityClassName} {
		if s != "" {
			v.dns1123Subdomain(key+"."+name, s)
		}
	}
}

// Probe replaces one of the Dynamo operator's worker probes. The operator does not merge a probe
// field by field: a probe set here replaces its default whole, so fields left at 0 (and an empty
// path) take the operator's default values for that probe.
type Probe struct {
	Path                string `json:"path"`
	InitialDelaySeconds int    `json:"initialDelaySeconds"`
	PeriodSeconds       int    `json:"periodSeconds"`
	TimeoutSeconds      int    `json:"timeoutSeconds"`
	FailureThreshold    int    `json:"failureThreshold"`
}

// Probes are a worker role's probe overrides; nil keeps the operator's probe.
type Probes struct {
	Startup   *Probe `json:"startup"`
	Liveness  *Probe `json:"liveness"`
	Readiness *Probe `json:"readiness"`
}

func (p Probes) validate(v validator, key string) {
	for name, probe := range map[string]*Probe{"startup": p.Startup, "liveness": p.Liveness, "readiness": p.Readiness} {
		if probe == nil {
			continue
		}
		k := key + "." + name
		if probe.Path != "" && !strings.HasPrefix(probe.Path, "/") {
			v.add(k+".path", "%q must start with /", probe.Path)
		}
		for field, n := range map[string]int{"initialDelaySeconds": probe.InitialDelaySeconds, "periodSeconds": probe.PeriodSeconds, "timeoutSeconds": probe.TimeoutSeconds, "failureThreshold": probe.FailureThreshold} {
			if n < 0 {
				v.add(k+"."+field, "must not be negative, got %d", n)
			}
		}
	}
}

// PodTemplatePatch is a strategic merge patch of a role's pod template (containers and env merge by
// name), applied after everything else: the escape hatch for what the typed config cannot say.
type PodTemplatePatch map[string]any

// validate checks that the patch applies to a pod template and leaves a valid one: unknown fields
// and wrong types are errors here, not at pod start.
func (p PodTemplatePatch) validate(v validator, key string, profile PodProfile) {
	if len(p) == 0 {
		return
	}
	// The program's template has the operator's main container with an image; what the patch
	// leaves of it must still pass the operator's rules.
	patched, err := p.Apply(corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: MainContainer, Image: "image"}}}})
	if err != nil {
		v.add(key, "%v", err)
		return
	}
	operatorTemplate(v, key, patched)
	for _, problem := range PodSecurity(&patched.ObjectMeta, &patched.Spec, profile) {
		v.add(key, "%s: a pod template patch may not reach past the pod", problem)
	}
}

// Apply patches a pod template.
func (p PodTemplatePatch) Apply(t corev1.PodTemplateSpec) (corev1.PodTemplateSpec, error) {
	if len(p) == 0 {
		return t, nil
	}
	original, err := json.Marshal(t)
	if err != nil {
		return t, err
	}
	patch, err := json.Marshal(map[string]any(p))
	if err != nil {
		return t, err
	}
	merged, err := strategicpatch.StrategicMergePatch(original, patch, corev1.PodTemplateSpec{})
	if err != nil {
		return t, fmt.Errorf("is not a valid strategic merge patch of a pod template: %v", err)
	}
	var out corev1.PodTemplateSpec
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return t, fmt.Errorf("does not leave a valid pod template: %s", jsonError(err))
	}
	return out, nil
}

// The starter marks every value a site must fill with a `your-` prefix.
var placeholderPattern = regexp.MustCompile(`(^|[^[:alnum:]])your-[[:alnum:]./_-]*`)

// findPlaceholders reports every string still carrying a starter placeholder (`your-...`).
func findPlaceholders(ps *Problems, key string, value any) {
	var walk func(key string, v reflect.Value)
	walk = func(key string, v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			if m := placeholderPattern.FindString(v.String()); m != "" {
				ps.Add(key, "still holds the placeholder %q: replace it with the cluster's value", strings.TrimLeft(m, "\"' =:/"))
			}
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(key, v.Elem())
			}
		case reflect.Struct:
			for name, i := range structFields(v.Type()) {
				walk(join(key, name), v.Field(i))
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(fmt.Sprintf("%s[%d]", key, i), v.Index(i))
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				walk(join(key, k.String()), k)
				walk(join(key, k.String()), v.MapIndex(k))
			}
		}
	}
	walk(key, reflect.ValueOf(value))
}

func (v validator) dns1035(key, s, what string) {
	if errs := validation.IsDNS1035Label(s); len(errs) > 0 {
		v.add(key, "%s is not a valid Service name: %s", fmt.Sprintf(what, s), strings.Join(errs, "; "))
	}
}
