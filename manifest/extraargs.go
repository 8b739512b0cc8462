package manifest

import (
	"fmt"
	"strings"

	"minimax-m3/config"
)

// RepeatedFlags refuses an extraArgs entry that repeats a flag the program already writes for
// that role: argparse keeps the last occurrence, so the typed setting would be silently overridden
// (or, for a boolean and its --no- form, contradicted), and the config, the policies and the PR
// check would describe a graph that does not run. A long option is compared by its name, with `_`
// read as `-` and a `--no-` prefix removed, as vLLM's and Dynamo's parsers read it; the very same
// switch again (--trust-remote-code twice) is let through. Short forms (-tp, -O) and dotted
// sub-options (--compilation-config.level) are not recognised.
func RepeatedFlags(c *config.Config) config.Problems {
	var ps config.Problems
	check := func(key string, set, extra []string) {
		// Each written flag, and whether it is written bare (a switch such as --trust-remote-code,
		// which an extra copy of the very same switch does not change).
		written := map[string]string{}
		for i, a := range set {
			if name, ok := flagName(a); ok {
				bare := i+1 == len(set) || strings.HasPrefix(set[i+1], "-")
				if bare && !strings.Contains(a, "=") {
					written[name] = a
				} else {
					written[name] = ""
				}
			}
		}
		for i, a := range extra {
			name, ok := flagName(a)
			if !ok {
				continue
			}
			same, found := written[name]
			if found && same != "" && same == a && (i+1 == len(extra) || strings.HasPrefix(extra[i+1], "-")) {
				continue // the same switch again: harmless
			}
			if found {
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
