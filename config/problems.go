package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Problem is one thing wrong with a stack's config, tied to the key that must change.
type Problem struct {
	Key     string `json:"key"`
	Message string `json:"message"`
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

func (ps Problems) sorted() Problems {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Key < ps[j].Key })
	return ps
}

// validator checks values and records each problem under the key being checked.
type validator struct{ ps *Problems }

func (v validator) add(key, format string, args ...any) { v.ps.Add(key, format, args...) }

func (v validator) nonEmpty(key, s string) {
	if strings.TrimSpace(s) == "" {
		v.add(key, "must not be empty")
	}
}

func (v validator) atLeast(key string, n, min int) {
	if n < min {
		v.add(key, "must be at least %d, got %d", min, n)
	}
}

func (v validator) oneOf(key, s string, allowed ...string) {
	if !slices.Contains(allowed, s) {
		v.add(key, "%q is not one of %s", s, strings.Join(allowed, ", "))
	}
}

func (v validator) errs(key, s, what string, errs []string) {
	if len(errs) > 0 {
		v.add(key, "%q is not a valid %s: %s", s, what, strings.Join(errs, "; "))
	}
}

func (v validator) dns1123Label(key, s string) {
	v.errs(key, s, "Kubernetes name", validation.IsDNS1123Label(s))
}

func (v validator) dns1123Subdomain(key, s string) {
	v.errs(key, s, "Kubernetes name", validation.IsDNS1123Subdomain(s))
}

func (v validator) qualifiedName(key, s string) {
	v.errs(key, s, "qualified name", validation.IsQualifiedName(s))
}

// image checks a container image reference as the kubelet's runtime would parse it.
func (v validator) image(key, s string) {
	if strings.TrimSpace(s) == "" {
		v.add(key, "must not be empty")
		return
	}
	if _, err := reference.ParseNormalizedNamed(s); err != nil {
		v.add(key, "%q is not a valid image reference: %v", s, err)
	}
}

func (v validator) duration(key, s string) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		v.add(key, "%q is not a positive duration such as 4h or 90m", s)
	}
}

func (v validator) quantity(key, s string) (resource.Quantity, bool) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		v.add(key, "%q is not a Kubernetes quantity", s)
		return q, false
	}
	return q, true
}

func (v validator) positiveQuantity(key, s string) {
	if q, ok := v.quantity(key, s); ok && q.Sign() <= 0 {
		v.add(key, "%q must be positive", s)
	}
}

func (v validator) annotations(key string, m map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v.qualifiedName(key+"."+k, k)
	}
}

// jsonObject checks that s is a JSON object and returns it.
func (v validator) jsonObject(key, s string) map[string]any {
	if s == "" {
		return nil
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		v.add(key, "is not a JSON object: %s", jsonError(err))
		return nil
	}
	return obj
}

func jsonError(err error) string {
	if err == nil {
		return "null"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
