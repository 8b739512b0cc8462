package policy

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Roll says whether a change restarts the pods of one graph component, and why.
type Roll struct {
	Graph     string // the DynamoGraphDeployment
	Component string // Frontend, Worker, PrefillWorker, DecodeWorker
	Rolls     bool
	// Why lists the component's fields that change (or "spec.restart", "graph replaced", "new
	// component"); empty when it does not roll.
	Why []string
}

// notRolling are the component fields whose change the operator applies without restarting the
// component's pods.
var notRolling = map[string]bool{"replicas": true, "scalingAdapter": true}

// Rolls reports, for every component of every graph the plan updates or replaces, whether its
// pods restart. A graph the plan creates or keeps as is rolls nothing.
func Rolls(p Plan) []Roll {
	var out []Roll
	for _, s := range p.Steps {
		if s.Kind() != "DynamoGraphDeployment" || s.Op == "delete-replaced" || s.Op == "create-replacement" {
			continue
		}
		oldComps, newComps := graphComponents(s.Old), graphComponents(s.New)
		names := make([]string, 0, len(newComps))
		for n := range newComps {
			names = append(names, n)
		}
		sort.Strings(names)
		restart := s.Old != nil && s.New != nil && !reflect.DeepEqual(at(s.Old, "spec", "restart"), at(s.New, "spec", "restart"))
		for _, n := range names {
			r := Roll{Graph: s.objectName(), Component: n}
			switch {
			case s.Op == "same" || s.Op == "create" || s.Old == nil:
			case s.Op == "replace":
				r.Why = []string{"graph replaced"}
			case oldComps[n] == nil:
				r.Why = []string{"new component"}
			default:
				r.Why = diffPaths("", oldComps[n], newComps[n], notRolling)
				if restart {
					r.Why = append(r.Why, "spec.restart")
				}
			}
			r.Rolls = len(r.Why) > 0
			out = append(out, r)
		}
	}
	return out
}

// graphComponents maps a graph's components by name.
func graphComponents(in map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _ := at(in, "spec", "components").([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			name, _ := m["name"].(string)
			out[name] = m
		}
	}
	return out
}

// diffPaths lists the paths at which two input trees differ, skipping top-level keys in skip.
func diffPaths(prefix string, a, b any, skip map[string]bool) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			if !skip[k] {
				sorted = append(sorted, k)
			}
		}
		sort.Strings(sorted)
		var out []string
		for _, k := range sorted {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, diffPaths(p, am[k], bm[k], nil)...)
		}
		return out
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		var out []string
		for i := range al {
			out = append(out, diffPaths(fmt.Sprintf("%s[%d]", prefix, i), al[i], bl[i], nil)...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{prefix}
}

// Summary is the one line per graph a PR check prints: "workers roll: Worker=yes" and so on.
func Summary(rolls []Roll) []string {
	byGraph := map[string][]string{}
	var graphs []string
	for _, r := range rolls {
		if byGraph[r.Graph] == nil {
			graphs = append(graphs, r.Graph)
		}
		yes := "no"
		if r.Rolls {
			yes = "yes"
		}
		byGraph[r.Graph] = append(byGraph[r.Graph], r.Component+"="+yes)
	}
	var out []string
	for _, g := range graphs {
		out = append(out, fmt.Sprintf("%s: workers roll: %s", g, strings.Join(byGraph[g], " ")))
	}
	return out
}

var trailingIndex = regexp.MustCompile(`^(.*)\[(\d+)\]$`)

// Compact shortens a list of changed paths for a summary: the items of one list collapse into
// one entry ("...args[9 items]").
func Compact(paths []string) []string {
	counts := map[string]int{}
	var out []string
	for _, p := range paths {
		if m := trailingIndex.FindStringSubmatch(p); m != nil {
			if counts[m[1]] == 0 {
				out = append(out, m[1])
			}
			counts[m[1]]++
			continue
		}
		out = append(out, p)
	}
	for i, p := range out {
		if n := counts[p]; n == 1 {
			out[i] = p + "[1 item]"
		} else if n > 1 {
			out[i] = fmt.Sprintf("%s[%d items]", p, n)
		}
	}
	return out
}

// UnexpectedRolls are the rolling components that allowed does not name: a comma-separated list
// of components, or "all".
func UnexpectedRolls(rolls []Roll, allowed string) []Roll {
	if allowed == "all" {
		return nil
	}
	meant := strings.Split(allowed, ",")
	var out []Roll
	for _, r := range rolls {
		if r.Rolls && !slices.Contains(meant, r.Component) {
			out = append(out, r)
		}
	}
	return out
}
