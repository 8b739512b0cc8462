package components

import (
	"fmt"
	"strings"

	"minimax-m3/config"
)

// RepeatedFlags refuses an extraArgs entry that repeats a flag the program already writes for
// that role: argparse keeps the last occurrence, so the typed setting would be silently overridden
// (or, for a boolean and its --no- form, contradicted), and the config, the policies and the PR
// check would describe a graph that does not run. A flag is compared by its name, with `_` read as
// `-` and a `--no-` prefix removed, as vLLM's and Dynamo's parsers read it.
func RepeatedFlags(c *config.Config) config.Problems {
	var ps config.Problems
	check := func(key string, set, extra []string) {
		written := map[string]bool{}
		for _, a := range set {
			if name, ok := flagName(a); ok {
				written[name] = true
			}
		}
		for i, a := range extra {
			if name, ok := flagName(a); ok && written[name] {
				ps.Add(fmt.Sprintf("%s.extraArgs[%d]", key, i), "%s repeats a flag the program already sets for this role: change the setting that writes it instead (see docs/configuration.md)", strings.SplitN(a, "=", 2)[0])
			}
		}
	}
	f := *c
	f.Frontend.ExtraArgs = nil
	check("frontend", FrontendArgs(&f), c.Frontend.ExtraArgs)
	for _, r := range c.Workers() {
		w := *r.Config
		w.ExtraArgs = nil
		check(r.Key, WorkerArgs(c, config.Role{Name: r.Name, Type: r.Type, Key: r.Key, Config: &w}), r.Config.ExtraArgs)
	}
	return ps
}

// flagName is a long option's name as a parser reads it: --max_num_seqs=8 is max-num-seqs, and
// --no-enable-x is enable-x.
func flagName(arg string) (string, bool) {
	name, ok := strings.CutPrefix(arg, "--")
	if !ok || name == "" {
		return "", false
	}
	name, _, _ = strings.Cut(name, "=")
	name = strings.ReplaceAll(name, "_", "-")
	return strings.TrimPrefix(name, "no-"), true
}
