package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"minimax-m3/config"
)

// TemplateAnnotationPrefix marks, on the graph, a digest of each component's spec as the stack
// last wrote it (its replicas left out: scaling rolls nothing), with the restart ID: when a
// digest changes, the operator replaces that component's pods.
const TemplateAnnotationPrefix = "minimax-m3.io/template-sha256."

// TemplateDigestsOf are the graph's annotations holding each component's digest in spec.
func TemplateDigestsOf(spec DynamoGraphDeploymentSpec) map[string]string {
	restart := ""
	if spec.Restart != nil {
		restart = spec.Restart.ID
	}
	out := map[string]string{}
	for _, comp := range spec.Components {
		comp.Replicas = 0
		b, _ := json.Marshal(struct { // cannot fail: plain values
			Component GraphComponent `json:"component"`
			Restart   string         `json:"restart"`
		}{comp, restart})
		sum := sha256.Sum256(b)
		out[TemplateAnnotationPrefix+comp.Name] = hex.EncodeToString(sum[:8])
	}
	return out
}

// TemplateDigests are the graph annotations the stack writes for c with the checks' decisions d: a
// digest per component.
func TemplateDigests(c *config.Config, d Decisions) (map[string]string, error) {
	spec, err := GraphSpec(c, d)
	if err != nil {
		return nil, err
	}
	return TemplateDigestsOf(spec), nil
}

// RolledComponents names the components whose digests differ between the live graph's
// annotations (live; nil: no graph yet, nothing rolls) and the update's (planned, TemplateDigests):
// those whose pods the update replaces.
func RolledComponents(live, planned map[string]string) []string {
	if live == nil {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(planned)) {
		if live[k] != planned[k] {
			out = append(out, strings.TrimPrefix(k, TemplateAnnotationPrefix))
		}
	}
	return out
}

// SurgingRolls warns when an update replaces the pods of a worker role whose rollout starts new
// pods beside the old ones: during the roll the role needs more GPUs than the stack has, so on a
// full rack the new pod waits for a GPU that never frees. live holds the live graph's annotations
// (nil: no graph yet, nothing rolls), planned the update's (TemplateDigests).
func SurgingRolls(c *config.Config, live, planned map[string]string) []string {
	if live == nil {
		return nil
	}
	var out []string
	for _, role := range c.Workers() {
		key := TemplateAnnotationPrefix + role.Name
		was, known := live[key]
		if known && was == planned[key] {
			continue
		}
		w := role.Config
		surge, _ := w.Rollout.Surge(w.Replicas)
		if surge == 0 {
			continue
		}
		rolls := "this update replaces " + role.Name + "'s pods"
		if !known {
			rolls = "this update may replace " + role.Name + "'s pods (the graph carries no digest of the stack's last one)"
		}
		out = append(out, fmt.Sprintf("%s: %s, and its rollout starts %d pod(s) (%d GPUs) beside its %d before it stops one: "+
			"%d GPUs while it rolls, the stack has %d. On a full rack the new pod stays Pending for a GPU that never frees; "+
			"set %s to RollingUpdate with maxSurge 0 (the default) to roll without a spare GPU",
			config.Key(role.Key+".rollout"), rolls, surge, surge*w.TensorParallelSize, w.Replicas,
			c.GPUs()+surge*w.TensorParallelSize, c.GPUs(), config.Key(role.Key+".rollout.strategy")))
	}
	return out
}

// FrontendName is the graph's frontend component.
const FrontendName = "Frontend"
