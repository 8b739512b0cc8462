package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
)

// coveringHostname says which of a route's hostnames covers hostname, as Gateway API matches them:
// the same name, a wildcard over it (*.example.com covers a.example.com and a.b.example.com), or
// none at all (the route takes every hostname its listener accepts). "" when none does.
func coveringHostname(hostnames []string, hostname string) string {
	if len(hostnames) == 0 {
		return "none, so every hostname of the listener"
	}
	for _, h := range hostnames {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if h == hostname {
			return h
		}
		if suffix, ok := strings.CutPrefix(h, "*"); ok && strings.HasSuffix(hostname, suffix) {
			return h
		}
	}
	return ""
}

// RouteLister lists the HTTPRoutes of the cluster (cluster.Reader does).
type RouteLister interface {
	Routes(ctx context.Context) ([]cluster.Route, error)
}

// checkRouteHostname refuses a hostname another stack, team or tool already routes on the same
// Gateway, before anything is created: two routes of one hostname on one Gateway split or steal
// each other's traffic, and which one wins is the Gateway's choice.
func checkRouteHostname(ctx context.Context, log Log, reader ObjectReader, c *config.Config, s Stack) error {
	lister, ok := reader.(RouteLister)
	if !ok || !c.Exposure.Enabled {
		return nil
	}
	routes, err := lister.Routes(ctx)
	if err != nil {
		if c.Kubernetes.RequireRead {
			return Unreadable(fmt.Errorf("listing HTTPRoutes: %w", err))
		}
		log.Warn("not checking that no other route holds exposure.hostname: listing HTTPRoutes: " + err.Error())
		return nil
	}
	e := c.Exposure
	var ps config.Problems
	for _, r := range routes {
		if r.Namespace == c.Namespace.Name && r.Name == c.RouteName() {
			continue // the stack's own, or the ownership check's to refuse
		}
		covers := coveringHostname(r.Hostnames, e.Hostname)
		if covers == "" || !slices.Contains(r.Gateways, e.Gateway.Namespace+"/"+e.Gateway.Name) {
			continue
		}
		owner := "not a stack's"
		if other := otherStack(r.LiveObject); other != "" {
			owner = "stack " + other + "'s"
		}
		if ownedBy(r.LiveObject, s.Name, s.Identity, s.Previous.Identity) {
			continue
		}
		ps.Add("exposure.hostname", "%q is already routed on Gateway %s/%s by HTTPRoute %s/%s (%s; its hostnames: %s): the two routes would split or take each other's traffic; choose a hostname of the stack's own, which no other route covers",
			e.Hostname, e.Gateway.Namespace, e.Gateway.Name, r.Namespace, r.Name, owner, covers)
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}
