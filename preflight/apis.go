package preflight

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// APIChecker says whether the cluster serves a resource (cluster.Reader does).
type APIChecker interface {
	Served(ctx context.Context, gvr schema.GroupVersionResource) (bool, error)
}

// checkAPIs refuses observability on a cluster without prometheus-operator's CRDs, exposure on
// one without Gateway API's (and an InferencePool backend on one without the Inference
// Extension's), before anything is created: the provider would otherwise create half
// the stack and then fail on the first object of the missing kind.
func checkAPIs(ctx context.Context, log Log, reader ObjectReader, c *config.Config) error {
	checker, ok := reader.(APIChecker)
	if !ok {
		return nil
	}
	type need struct {
		gvr        schema.GroupVersionResource
		key, whose string
	}
	var needs []need
	if c.Observability.Enabled {
		needs = append(needs, need{manifest.PodMonitors, "observability.enabled", "prometheus-operator's CRDs (kube-prometheus-stack has them), or turn observability off"},
			need{manifest.PrometheusRules, "observability.enabled", "prometheus-operator's CRDs (kube-prometheus-stack has them), or turn observability off"})
	}
	if c.Exposure.Enabled {
		needs = append(needs, need{manifest.HTTPRoutes, "exposure.enabled", "Gateway API's CRDs and a Gateway controller, or turn exposure off"})
	}
	if c.InferencePool() {
		// The operator refuses an epp component on a cluster without them, or fails the graph.
		needs = append(needs, need{manifest.InferencePools, "exposure.backend", "the Gateway API Inference Extension's CRDs and a gateway that implements it, or use backend frontend"})
	}
	var ps config.Problems
	for _, n := range needs {
		gvr := n.gvr
		served, err := checker.Served(ctx, gvr)
		if err != nil {
			if c.Kubernetes.RequireRead {
				return Unreadable(fmt.Errorf("reading the cluster's %s API: %w", gvr.Resource, err))
			}
			log.Warn(fmt.Sprintf("not checking that the cluster serves %s (%s): %v", gvr.Resource, n.key, err))
			continue
		}
		if !served {
			ps.Add(n.key, "the cluster does not serve %s (%s): install %s", gvr.Resource, gvr.GroupVersion(), n.whose)
		}
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}
