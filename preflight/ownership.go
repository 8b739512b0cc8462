package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
	"minimax-m3/manifest"
)

// ObjectReader reads a live object's metadata; found is false when it does not exist.
type ObjectReader interface {
	Read(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (obj LiveObject, found bool, err error)
}

// LiveObject is what the ownership check needs of a live object: its labels and annotations.
type LiveObject = cluster.LiveObject

// plannedObject is an object the stack creates, and the config key that makes the stack use an
// existing one instead.
type plannedObject struct {
	gvr             schema.GroupVersionResource
	kind, namespace string
	name            string
	key, useInstead string
}

// foreign says whether the recipe has no part in an object, so that no stack adopts it: a kind the
// recipe does not create, the dashboard, or anything outside the stack's namespace (perhaps
// another team's).
func (o plannedObject) foreign(c *config.Config) bool {
	return (o.namespace != "" && o.namespace != c.Namespace.Name) ||
		slices.Contains([]string{"PodMonitor", "PrometheusRule", "HTTPRoute"}, o.kind) ||
		strings.HasPrefix(o.key, "observability.")
}

func (o plannedObject) String() string {
	if o.namespace == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.namespace + "/" + o.name
}

// plannedObjects lists what the stack would create, as the components do: what the graphs share,
// and each graph's objects (scaleOut), in the order of a stack of one graph.
func plannedObjects(c *config.Config) []plannedObject {
	ns := c.Namespace.Name
	graphs := c.Graphs()
	configMap := func(g *config.Config) plannedObject {
		return plannedObject{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", ns, g.ConfigMapName(), "graphName", "choose another graphName"}
	}
	var out []plannedObject
	// The graphs first: a credential that may read them but not some other object (a
	// cluster-scoped Namespace) still learns their pins and their workload provider before the
	// check gives up.
	for _, g := range graphs {
		out = append(out, plannedObject{cluster.GraphResource, "DynamoGraphDeployment", ns, g.GraphName, "graphName", "choose another graphName"})
	}
	out = append(out, configMap(graphs[0]))
	if c.Namespace.Create {
		out = append(out, plannedObject{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "Namespace", "", ns,
			"namespace.create", "set namespace.create=false to deploy into it (the stack then never changes or deletes it)"})
	}
	if c.ModelDownload.Enabled && !c.HuggingFace.ExistingSecret {
		out = append(out, plannedObject{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "Secret", ns, c.HuggingFace.SecretName,
			"huggingFace.existingSecret", "set huggingFace.existingSecret=true (and remove hfToken) to use it"})
	}
	if c.ModelCache.Create {
		out = append(out, plannedObject{schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, "PersistentVolumeClaim", ns, c.ModelCache.ClaimName,
			"modelCache.create", "set modelCache.create=false to use it (the stack then never changes or deletes it)"})
	}
	if c.ModelDownload.Enabled {
		out = append(out, plannedObject{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "Job", ns, c.ModelDownload.JobName,
			"modelDownload.enabled", "set modelDownload.enabled=false to leave the download to the stack that owns the cache"})
	}
	for _, g := range graphs {
		out = append(out, graphObjects(g)...)
	}
	if c.Exposure.Enabled {
		out = append(out, plannedObject{manifest.HTTPRoutes, "HTTPRoute", ns, c.RouteName(), "graphName", "choose another graphName"})
	}
	for _, g := range graphs {
		out = append(out, monitoringObjects(g)...)
	}
	for _, g := range graphs[1:] {
		out = append(out, configMap(g))
	}
	return out
}

// graphObjects are a graph's ComputeDomain, benchmark ConfigMap, budgets and NetworkPolicy (g is
// the graph's config, config.Config.Graph).
func graphObjects(g *config.Config) []plannedObject {
	ns := g.Namespace.Name
	var out []plannedObject
	if g.ComputeDomain.Create {
		out = append(out, plannedObject{schema.GroupVersionResource{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomains"}, "ComputeDomain", ns, g.ComputeDomainName(),
			"computeDomain.name", "choose another computeDomain.name (or graphName)"})
	}
	if g.Benchmark.Enabled {
		out = append(out, plannedObject{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", ns, manifest.AIPerfConfigMapName(g),
			"graphName", "choose another graphName"})
	}
	if g.Placement.DisruptionBudget {
		for _, r := range g.Workers() {
			out = append(out, plannedObject{manifest.DisruptionBudgets, "PodDisruptionBudget", ns, manifest.DisruptionBudgetName(g, r),
				"placement.disruptionBudget", "set placement.disruptionBudget=false to keep it (or choose another graphName)"})
		}
	}
	if g.NetworkPolicy.Enabled {
		out = append(out, plannedObject{manifest.NetworkPolicies, "NetworkPolicy", ns, g.NetworkPolicyName(),
			"networkPolicy.enabled", "set networkPolicy.enabled=false to keep it (or choose another graphName)"})
	}
	return out
}

// monitoringObjects are a graph's monitors, alert rules and dashboard (observability).
func monitoringObjects(g *config.Config) []plannedObject {
	if !g.Observability.Enabled {
		return nil
	}
	ns := g.Namespace.Name
	var out []plannedObject
	monitors := []string{g.FrontendMonitorName(), g.WorkerMonitorName()}
	if g.InferencePool() {
		monitors = append(monitors, g.SidecarMonitorName())
	}
	for _, m := range monitors {
		out = append(out, plannedObject{manifest.PodMonitors, "PodMonitor", ns, m, "graphName", "choose another graphName"})
	}
	out = append(out, plannedObject{manifest.PrometheusRules, "PrometheusRule", ns, g.AlertRuleName(), "graphName", "choose another graphName"})
	if g.Observability.Dashboard.Enabled {
		out = append(out, plannedObject{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", g.DashboardNamespace(), g.DashboardName(),
			"observability.dashboard.enabled", "choose another graphName or observability.dashboard.namespace"})
	}
	return out
}

// checkOwnership stops the program before any resource is registered when an object it would
// create already exists and is not this stack's: server-side apply would otherwise take it over
// silently, and a later destroy would delete what another stack or a person relies on. With
// `adopt` the stack takes over objects no stack manages; another stack's objects it never takes.
// It also stops a first `up` with restart.id set, which the CRD would reject once the rest of the
// stack exists. Where the cluster cannot be read (no kubeconfig, or it is unreachable) the check is
// skipped with a warning; `up` then fails at the provider.
//
// The returned Ownership lists the objects the stack adopts (now, or in an earlier update: they
// keep the adoption mark).
func checkOwnership(ctx context.Context, log Log, reader ObjectReader, c *config.Config, s Stack) (Ownership, error) {
	meta := Ownership{adopted: map[string]bool{}, liveGraphs: map[string]map[string]string{}}
	if s.Previous.Identity != s.Identity {
		meta.Previous = s.Previous.Identity
	}
	var ps config.Problems
	for _, obj := range plannedObjects(c) {
		live, found, err := reader.Read(ctx, obj.gvr, obj.namespace, obj.name)
		if err != nil {
			if c.Kubernetes.RequireRead {
				return meta, Unreadable(fmt.Errorf("reading %s: %w", obj, err))
			}
			log.Warn(fmt.Sprintf("not checking for existing objects the stack would take over: reading %s: %v", obj, err))
			return meta, nil
		}
		if obj.kind == "DynamoGraphDeployment" && !found && c.Restart.ID != "" {
			// The CRD rejects spec.restart on create; say so before anything is created.
			ps.Add("restart.id", "%s does not exist yet, and a graph cannot be created with spec.restart: remove restart.id for the first up, set it afterwards to restart the graph", obj)
		}
		if !found {
			continue
		}
		if obj.kind == "DynamoGraphDeployment" {
			annotations := live.Annotations
			if annotations == nil {
				annotations = map[string]string{}
			}
			meta.liveGraphs[obj.name] = annotations
		}
		if ownedBy(live, s.Name, s.Identity, meta.Previous) {
			if live.Annotations[manifest.AdoptedAnnotation] == "true" {
				meta.adopted[objectKey(obj.kind, obj.name)] = true
			}
			continue
		}
		// Another stack's object is never taken over, adopt or not: two stacks would manage it,
		// and either one's destroy would delete it under the other.
		if other := otherStack(live); other != "" {
			ps.Add(obj.key, "%s already exists and belongs to stack %q: %s", obj, other, obj.useInstead)
			continue
		}
		if obj.foreign(c) {
			// Not an object of the recipe's, and perhaps in a namespace another team owns: adopt
			// would have the stack delete it with the stack, or when the feature is turned off.
			ps.Add(obj.key, "%s already exists and was not created by this stack: %s (adopt does not take over an object the recipe has no part in)", obj, obj.useInstead)
			continue
		}
		if c.Adopt {
			meta.adopted[objectKey(obj.kind, obj.name)] = true
			continue
		}
		ps.Add(obj.key, "%s already exists and was not created by this stack: %s; or set adopt=true to take it over (a kustomize deployment of the recipe, for one)",
			obj, obj.useInstead)
	}
	for _, g := range c.Graphs() {
		live := meta.liveGraphs[g.GraphName]
		if p, ok := live[cluster.WorkloadProviderAnnotation]; ok && p != cluster.WorkloadProviderComponent {
			ps.Add("graphName", "%s", cluster.ProviderMessage(g.Namespace.Name, g.GraphName, p))
		}
		ps = append(ps, sameComponents(g, live)...)
	}
	if len(ps) > 0 {
		return meta, ps
	}
	return meta, nil
}

// sameComponents refuses a change of the live graph's set of components (another profile under
// the same graphName): the Dynamo operator's webhook refuses to add or remove components of a
// graph. The live set is the one the stack's digests name (templateDigests).
func sameComponents(c *config.Config, live map[string]string) config.Problems {
	var was []string
	for k := range live {
		if name, ok := strings.CutPrefix(k, manifest.TemplateAnnotationPrefix); ok {
			was = append(was, name)
		}
	}
	if len(was) == 0 {
		return nil
	}
	planned := []string{manifest.FrontendName}
	for _, r := range c.Workers() {
		planned = append(planned, r.Name)
	}
	if c.InferencePool() {
		planned = append(planned, manifest.EndpointPickerName)
	}
	slices.Sort(was)
	slices.Sort(planned)
	if slices.Equal(was, planned) {
		return nil
	}
	var ps config.Problems
	notPicker := func(name string) bool { return name == manifest.EndpointPickerName }
	if slices.Equal(slices.DeleteFunc(slices.Clone(was), notPicker), slices.DeleteFunc(slices.Clone(planned), notPicker)) {
		// Only the endpoint picker differs: the route moving between the frontend and an
		// InferencePool on a live graph.
		has := "has no endpoint picker (component " + manifest.EndpointPickerName + ")"
		if slices.Contains(was, manifest.EndpointPickerName) {
			has = "has an endpoint picker (component " + manifest.EndpointPickerName + ")"
		}
		if !c.Exposure.Enabled {
			// Turning exposure off would take the picker away.
			ps.Add("exposure.enabled", "the live DynamoGraphDeployment %s/%s %s, which turning exposure off removes, and the Dynamo operator refuses to add or remove a graph's components: "+
				"keep exposure on, or destroy the stack first", c.Namespace.Name, c.GraphName, has)
			return ps
		}
		ps.Add("exposure.backend", "the live DynamoGraphDeployment %s/%s %s, and the Dynamo operator refuses to add or remove a graph's components: "+
			"the route cannot move between the frontend and an InferencePool on a live graph; choose another graphName (a new graph beside this one, which the route follows) or destroy the stack first",
			c.Namespace.Name, c.GraphName, has)
		return ps
	}
	ps.Add("profile", "the live DynamoGraphDeployment %s/%s has the components %s, profile %q has %s: the Dynamo operator refuses to add or remove a graph's components; "+
		"choose another graphName (a new graph beside this one) or destroy the stack first", c.Namespace.Name, c.GraphName,
		strings.Join(was, ", "), c.Profile, strings.Join(planned, ", "))
	return ps
}

// ownedBy reports whether a live object is this stack's. Objects carry the stack's identity
// (identities: the current one, and the one before a rename). Objects this program wrote before it
// annotated them carry only its labels: the stack's instance, or (earlier still) no instance.
// Nothing else counts: another Pulumi program's, or the Pulumi Kubernetes Operator's, objects are
// written by the same Kubernetes provider but are not this stack's.
func ownedBy(o LiveObject, stack string, identities ...string) bool {
	if id, annotated := o.Annotations[manifest.StackAnnotation]; annotated {
		return id != "" && slices.Contains(identities, id)
	}
	if o.Labels[manifest.ManagedByLabel] != manifest.ManagedBy {
		return false
	}
	if instance, labelled := o.Labels[manifest.InstanceLabel]; labelled {
		// The graph carries the recipe's part-of label.
		return instance == stack && (o.Labels[manifest.PartOfLabel] == manifest.PartOf || o.Labels[manifest.PartOfLabel] == "dynamo")
	}
	return o.Labels[manifest.PartOfLabel] == manifest.PartOf
}

// otherStack names the stack of this program a live object belongs to ("" when none does).
func otherStack(o LiveObject) string {
	if id := o.Annotations[manifest.StackAnnotation]; id != "" {
		return id
	}
	if o.Labels[manifest.ManagedByLabel] == manifest.ManagedBy {
		return o.Labels[manifest.InstanceLabel]
	}
	return ""
}
