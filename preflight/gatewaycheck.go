package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
)

// GatewayReader reads a Gateway's listeners (cluster.Reader does).
type GatewayReader interface {
	Gateway(ctx context.Context, namespace, name string) (cluster.Gateway, bool, error)
}

// checkGateway refuses, before anything is created, a route the site's Gateway would not take:
// the Gateway does not exist, has no listener of exposure.gateway.sectionName, or none of the
// listeners the route attaches to admits an HTTPRoute from the stack's namespace (allowedRoutes).
// The provider would create the route anyway, and it would sit there unattached: `up` would end
// with no error and no traffic. Each refusal names the keys involved.
func checkGateway(ctx context.Context, log Log, reader ObjectReader, c *config.Config) error {
	gr, ok := reader.(GatewayReader)
	if !ok || !c.Exposure.Enabled {
		return nil
	}
	e := c.Exposure.Gateway
	g, found, err := gr.Gateway(ctx, e.Namespace, e.Name)
	switch {
	case err != nil && c.Kubernetes.RequireRead:
		return Unreadable(fmt.Errorf("reading Gateway %s/%s: %w", e.Namespace, e.Name, err))
	case err != nil:
		log.Warn(fmt.Sprintf("not checking that Gateway %s/%s takes the route: %v", e.Namespace, e.Name, err))
		return nil
	case !found:
		return config.Problems{{Key: "exposure.gateway.name", Message: fmt.Sprintf("Gateway %s/%s does not exist (exposure.gateway.namespace %s, exposure.gateway.name %s): the route would attach to nothing; name the site's Gateway",
			e.Namespace, e.Name, e.Namespace, e.Name)}}
	}
	listeners := g.Listeners
	if e.SectionName != "" {
		i := slices.IndexFunc(listeners, func(l cluster.Listener) bool { return l.Name == e.SectionName })
		if i < 0 {
			var names []string
			for _, l := range listeners {
				names = append(names, l.Name)
			}
			return config.Problems{{Key: "exposure.gateway.sectionName", Message: fmt.Sprintf("Gateway %s/%s has no listener %q (its listeners: %s)", e.Namespace, e.Name, e.SectionName, strings.Join(names, ", "))}}
		}
		listeners = listeners[i : i+1]
	}
	nsLabels, known := namespaceLabels(ctx, reader, c)
	var refused []string
	for _, l := range listeners {
		why := admits(l, g.Namespace, c.Namespace.Name, nsLabels, known)
		if why == "" {
			return nil
		}
		refused = append(refused, fmt.Sprintf("listener %s %s", l.Name, why))
	}
	key := "exposure.gateway.name"
	if e.SectionName != "" {
		key = "exposure.gateway.sectionName"
	}
	return config.Problems{{Key: key, Message: fmt.Sprintf("Gateway %s/%s takes no HTTPRoute from namespace.name %s: %s; ask the Gateway's owner to admit the namespace (allowedRoutes), or name a listener or Gateway that does",
		e.Namespace, e.Name, c.Namespace.Name, strings.Join(refused, "; "))}}
}

// admits says why a listener does not take an HTTPRoute from namespace ns ("" when it does).
// A namespace whose labels are not known yet (the stack creates it) passes a selector.
func admits(l cluster.Listener, gatewayNS, ns string, nsLabels map[string]string, known bool) string {
	if len(l.Kinds) > 0 && !slices.Contains(l.Kinds, "HTTPRoute") {
		return "admits only " + strings.Join(l.Kinds, ", ")
	}
	switch l.From {
	case "All":
		return ""
	case "Same":
		if ns == gatewayNS {
			return ""
		}
		return "admits routes from its own namespace only (allowedRoutes.namespaces.from: Same)"
	case "Selector":
		if !known || l.Selector == nil {
			return ""
		}
		sel, err := metav1.LabelSelectorAsSelector(l.Selector)
		if err != nil || sel.Matches(labels.Set(nsLabels)) {
			return ""
		}
		return "admits routes from namespaces labelled " + sel.String() + " only"
	}
	return "admits routes from " + l.From
}

// namespaceLabels are the stack's namespace's labels, when it exists.
func namespaceLabels(ctx context.Context, reader ObjectReader, c *config.Config) (map[string]string, bool) {
	ns, found, err := reader.Read(ctx, namespacesResource, "", c.Namespace.Name)
	if err != nil || !found {
		return nil, false
	}
	return ns.Labels, true
}
