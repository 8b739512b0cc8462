package manifest

import "minimax-m3/config"

// Decisions are what the pre-deploy checks (package preflight) decided from the cluster that
// changes a graph's objects, beside its config: the config itself is never written. The zero value
// builds the graph as configured, as a render or a policy check without a cluster does.
type Decisions struct {
	// Clique is the value of placement.topologyKey the workers are pinned to: placement.clique,
	// the clique the running graph is pinned to, or the one chosen for a new graph ("": the
	// configured placement.clique, if any).
	Clique string
	// WorkerRuntimeClass is the RuntimeClass of a worker role that names none: the one the site's
	// pod policy or the namespace names for the GPU workers ("": none).
	WorkerRuntimeClass string
}

// CliqueOf is the clique the graph's workers are pinned to ("" when none).
func (d Decisions) CliqueOf(c *config.Config) string {
	if d.Clique != "" {
		return d.Clique
	}
	return c.Placement.Clique
}

// WorkerScheduling is a worker role's scheduling with the decided RuntimeClass where it names none.
func (d Decisions) WorkerScheduling(s config.Scheduling) config.Scheduling {
	if s.RuntimeClassName == "" {
		s.RuntimeClassName = d.WorkerRuntimeClass
	}
	return s
}

// WorkersRuntimeClass is the RuntimeClass every worker role takes, "" when they take none or
// differ.
func (d Decisions) WorkersRuntimeClass(c *config.Config) string {
	class := ""
	for i, r := range c.Workers() {
		s := d.WorkerScheduling(r.Config.Scheduling)
		if i > 0 && s.RuntimeClassName != class {
			return ""
		}
		class = s.RuntimeClassName
	}
	return class
}
