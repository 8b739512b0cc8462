package components

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
	"minimax-m3/preflight"
)

// Component resource types.
const (
	deploymentType    = "minimax-m3:index:Deployment"
	namespaceType     = "minimax-m3:index:Namespace"
	hfTokenType       = "minimax-m3:index:HFTokenSecret"
	modelCacheType    = "minimax-m3:index:ModelCache"
	computeDomainType = "minimax-m3:index:ComputeDomain"
	graphType         = "minimax-m3:index:DynamoGraph"
)

// MiniMaxM3Args is a validated stack config and the token the stack holds (a secret, or nil).
type MiniMaxM3Args struct {
	Config *config.Config
	// Decisions are what the pre-deploy checks found and decided (package preflight): the objects
	// the stack adopted, the namespace's Pod Security level, the workers' clique and RuntimeClass.
	Decisions preflight.Decisions
	HFToken   pulumi.StringInput
	// Results reads the smoke test's result from its pod; nil leaves it out.
	Results JobResultReader
	// GraphStatus follows the operator's status of the graph during `up`; nil does not.
	GraphStatus GraphStatusWatcher
	// Routes sets the route's weights while an update rolls the graphs of a stack of several one
	// at a time (scaleOut.drain); nil leaves every graph in the route.
	Routes RouteWeights
	// GraphReadyBefore is the graph's generation an earlier up saw Ready (its output
	// GraphReadyGenerationOutput; 0: none): an up that leaves that generation as it is does not
	// wait for the graph again.
	GraphReadyBefore int64
	// GraphsReadyBefore is the same for the stack's other graphs (scaleOut.graphs), by name.
	GraphsReadyBefore map[string]int64
	// Rendering writes manifests instead of applying them: no object gets a UID.
	Rendering bool
	// Packaged is a Deployment another program (or language) builds through the package: its
	// resources have no aliases from the program's first naming scheme.
	Packaged bool
	// Provider, when set, is made as the component's own Kubernetes provider (a child, used by every
	// object under it); nil uses the provider the component's options give.
	Provider *kubernetes.ProviderArgs
}

// MiniMaxM3 is one stack's deployment: namespace, token Secret, model cache, ComputeDomain and the
// Dynamo graph, wired so the graph is created only once the model is in the cache.
//
// Logical names are fixed (they never follow graphName or any other setting), so a rename changes
// only the objects whose Kubernetes name changes. Aliases carry stacks created when every logical
// name was derived from graphName over to these names without touching a live object.
type MiniMaxM3 struct {
	pulumi.ResourceState

	Namespace       pulumi.StringOutput `pulumi:"namespace"`
	GraphName       pulumi.StringOutput `pulumi:"graphName"`
	FrontendService pulumi.StringOutput `pulumi:"frontendService"`
	CacheClaimName  pulumi.StringOutput `pulumi:"cacheClaimName"`
	ComputeDomain   pulumi.StringOutput `pulumi:"computeDomain"`
	// ExternalURL is where clients reach the frontend through the site's Gateway (exposure on).
	ExternalURL pulumi.StringOutput `pulumi:"-"`
	// GraphReadyGeneration is the graph's generation this up saw Ready (or wrote, when it does not
	// wait for it).
	GraphReadyGeneration pulumi.IntOutput `pulumi:"graphReadyGeneration"`
	// SmokeTest is the first graph's smoke test, nil when the smoke test does not run.
	SmokeTest *SmokeTest
	// Graphs are the stack's graphs (scaleOut.graphs), in order: the first is the one the other
	// fields name.
	Graphs []*Graph `pulumi:"-"`
}

// NewMiniMaxM3 builds every object of a stack from a validated Config.
func NewMiniMaxM3(ctx *pulumi.Context, name string, args *MiniMaxM3Args, opts ...pulumi.ResourceOption) (*MiniMaxM3, error) {
	c := args.Config
	meta := StackMeta{args.Decisions.Ownership}
	d := &MiniMaxM3{}
	legacy := c.GraphName // the logical name every resource had under the first naming scheme
	if args.Packaged {
		legacy = ""
	}
	opts = append(opts, legacyAlias(ctx, legacy, deploymentType))
	if err := ctx.RegisterComponentResource(deploymentType, name, d, opts...); err != nil {
		return nil, err
	}
	var parent pulumi.ResourceOption = pulumi.Parent(d)
	if args.Provider != nil {
		p, err := kubernetes.NewProvider(ctx, "kubernetes", args.Provider, parent)
		if err != nil {
			return nil, err
		}
		parent = pulumi.Composite(parent, pulumi.Providers(p))
	}

	ns, err := NewNamespace(ctx, "namespace", &NamespaceArgs{
		Name:        c.Namespace.Name,
		Create:      c.Namespace.Create,
		PodSecurity: args.Decisions.PodSecurity,
		// The class the workers take, for other stacks in the namespace.
		WorkerRuntimeClass: args.Decisions.Graph(0).WorkersRuntimeClass(c),
		// A namespace that holds a kept cache claim is kept too, or deleting it would take the
		// claim; so is one the stack adopted: it existed before, with whatever it holds.
		RetainOnDelete: c.ModelCache.Create && !c.ModelCache.DeleteOnDestroy || meta.Adopted("Namespace", c.Namespace.Name),
		Meta:           meta,
		LegacyName:     legacySuffixed(legacy, "-namespace"),
	}, parent)
	if err != nil {
		return nil, err
	}

	cacheArgs := &ModelCacheArgs{
		Namespace:   ns.Name,
		Cache:       c.ModelCache,
		Download:    c.ModelDownload,
		Model:       c.Model,
		PullSecrets: c.ImagePullSecrets,
		Meta:        meta,
		LegacyName:  legacySuffixed(legacy, "-model-cache"),
	}
	if c.ModelDownload.Enabled {
		tokenArgs := &HFTokenSecretArgs{Namespace: ns.Name, SecretName: c.HuggingFace.SecretName, Meta: meta, LegacyName: legacySuffixed(legacy, "-hf-token")}
		if !c.HuggingFace.ExistingSecret {
			tokenArgs.Token = args.HFToken
		}
		token, err := NewHFTokenSecret(ctx, "hf-token", tokenArgs, parent)
		if err != nil {
			return nil, err
		}
		cacheArgs.HFTokenSecret = c.HuggingFace.SecretName
		cacheArgs.Requires = token.Ready
	}
	cache, err := NewModelCache(ctx, "model-cache", cacheArgs, parent)
	if err != nil {
		return nil, err
	}

	// Each graph with its ComputeDomain, in its own clique; the first keeps the names of a stack
	// of one graph.
	var (
		graphs []*Graph
		first  *ComputeDomain
	)
	rollout := newGraphRollout(ctx, args.Routes, c)
	for i, gc := range c.Graphs() {
		decided := args.Decisions.Graph(i)
		cd, err := NewComputeDomain(ctx, graphComponent("compute-domain", i), &ComputeDomainArgs{
			Namespace:            ns.Name,
			Name:                 gc.ComputeDomainName(),
			ChannelClaimTemplate: gc.ChannelClaimTemplateName(),
			Create:               gc.ComputeDomain.Create,
			Meta:                 meta,
			LegacyName:           legacySuffixed(legacyOf(legacy, i), "-compute-domain"),
		}, parent)
		if err != nil {
			return nil, err
		}
		after := append(append([]pulumi.Resource{}, cd.Ready...), cache.Ready...)
		graphOpts := []pulumi.ResourceOption{parent, pulumi.DependsOn(after)}
		if i > 0 && meta.LiveGraph(gc.GraphName) != nil && meta.LiveGraph(c.GraphNameOf(i-1)) != nil {
			// An update of running graphs changes them one at a time: this one once the one
			// before it is Ready again and has passed its smoke test, so a change that fails
			// stops at the first graph it breaks and the others keep serving as they were.
			graphOpts = append(graphOpts, graphs[i-1].servedOptions()...)
		}
		// With a route: out of it while the change rolls the graph's pods, after the graph
		// before is back in it.
		graphOpts = append(graphOpts, pulumi.DependsOnInputs(rollout.drain(gc, meta.LiveGraph(gc.GraphName) != nil, rolls(meta.LiveGraph(gc.GraphName), gc, decided))))
		readyBefore := args.GraphsReadyBefore[gc.GraphName]
		if i == 0 {
			readyBefore = args.GraphReadyBefore
		}
		graph, err := NewGraph(ctx, graphComponent("graph", i), &GraphArgs{Namespace: ns.Name, Config: gc, Decided: decided, Meta: meta, Index: i,
			LegacyName: legacySuffixed(legacyOf(legacy, i), "-graph"), Status: args.GraphStatus, ReadyBefore: readyBefore}, graphOpts...)
		if err != nil {
			return nil, err
		}
		if c.SmokeTest.Enabled && c.Readiness.WaitForReady {
			graph.SmokeTest, err = NewSmokeTest(ctx, graphComponent("smoke-test", i), &SmokeTestArgs{Namespace: ns.Name, Config: gc, Decided: decided, Meta: meta, Index: i,
				GraphReady: graph.Ready, Results: args.Results}, parent)
			if err != nil {
				return nil, err
			}
		}
		rollout.restore(gc, meta.LiveGraph(gc.GraphName) != nil, graph.serving())
		if c.Observability.Enabled {
			if _, err := NewMonitoring(ctx, graphComponent("monitoring", i), &MonitoringArgs{
				Namespace: ns.Name, Config: gc, Meta: meta, Index: i, ComputeDomainUID: cd.UID, HasComputeDomain: gc.ComputeDomain.Create && !args.Rendering,
			}, pulumi.Parent(graph)); err != nil {
				return nil, err
			}
		}
		if i == 0 {
			first = cd
		}
		graphs = append(graphs, graph)
	}
	if c.SmokeTest.Enabled && !c.Readiness.WaitForReady {
		_ = ctx.Log.Warn("no smoke test: readiness.waitForReady=false, so nothing waits for the graph to serve before it would run", nil)
	}
	graph := graphs[0]
	d.SmokeTest = graph.SmokeTest
	d.Graphs = graphs

	d.Namespace = ns.Name
	if c.Exposure.Enabled {
		// One route to every graph, a child of the first as a stack of one graph has it.
		exposureOpts := []pulumi.ResourceOption{pulumi.Parent(graph)}
		if c.ScaledOut() {
			// A graph joins the route once it serves: Ready, and past its smoke test; the route's
			// own update waits for every graph back in it.
			for _, g := range graphs {
				exposureOpts = append(exposureOpts, g.servedOptions()...)
			}
		}
		if rollout != nil {
			// The route's own update waits for its rules given back from an interrupted rollout,
			// and for every graph back in it.
			for _, r := range rollout.restored {
				exposureOpts = append(exposureOpts, pulumi.DependsOnInputs(r))
			}
		}
		exposure, err := NewExposure(ctx, "exposure", &ExposureArgs{Namespace: ns.Name, Config: c, Meta: meta}, exposureOpts...)
		if err != nil {
			return nil, err
		}
		d.ExternalURL = exposure.URL
	}
	d.GraphName = graph.Name
	d.FrontendService = graph.Name.ApplyT(func(n string) string { return n + "-frontend" }).(pulumi.StringOutput)
	d.CacheClaimName = cache.ClaimName
	d.ComputeDomain = first.Name
	d.GraphReadyGeneration = graph.ReadyGeneration
	return d, ctx.RegisterResourceOutputs(d, pulumi.Map{
		"graphReadyGeneration": d.GraphReadyGeneration,
		"namespace":            d.Namespace,
		"graphName":            d.GraphName,
		"frontendService":      d.FrontendService,
		"cacheClaimName":       d.CacheClaimName,
		"computeDomain":        d.ComputeDomain,
	})
}

// Outputs are the stack outputs: where the frontend is and how to reach it.
func Outputs(c *config.Config, d *MiniMaxM3) pulumi.Map {
	port := config.FrontendPort
	chat := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"What is 2 + 2?"}],"max_tokens":1024}`, c.ServedModelName())
	out := pulumi.Map{
		"namespace":                d.Namespace,
		"graphName":                d.GraphName,
		"frontendService":          d.FrontendService,
		"frontendPort":             pulumi.Int(port),
		"frontendUrl":              pulumi.Sprintf("http://%s.%s.svc.cluster.local:%d", d.FrontendService, d.Namespace, port),
		"portForwardCommand":       pulumi.Sprintf("kubectl -n %s port-forward service/%s %d:%d", d.Namespace, d.FrontendService, port, port),
		"smokeTestModels":          pulumi.String(fmt.Sprintf("curl --fail-with-body http://localhost:%d/v1/models", port)),
		"smokeTestChat":            pulumi.String(fmt.Sprintf("curl --fail-with-body http://localhost:%d/v1/chat/completions -H 'Content-Type: application/json' -d '%s'", port, chat)),
		"gpuCount":                 pulumi.Int(c.GPUs()),
		"model":                    pulumi.String(c.Model.Name),
		"servedModelName":          pulumi.String(c.ServedModelName()),
		"modelRevision":            pulumi.String(c.Model.Revision),
		"draftModel":               pulumi.String(c.Model.Draft.Name),
		"draftRevision":            pulumi.String(c.Model.Draft.Revision),
		"speculativeMode":          pulumi.String(string(c.Speculative.Mode)),
		"computeDomain":            d.ComputeDomain,
		"channelClaimTemplate":     pulumi.String(c.ChannelClaimTemplateName()),
		"cacheClaimName":           d.CacheClaimName,
		GraphReadyGenerationOutput: d.GraphReadyGeneration,
		"waitCommand":              pulumi.Sprintf("kubectl -n %s wait --for=condition=Ready dynamographdeployment/%s --timeout=%s", d.Namespace, d.GraphName, c.Readiness.Timeout),
	}
	if d.SmokeTest != nil {
		out["smokeTest"] = d.SmokeTest.Result
	}
	if c.ScaledOut() {
		// Every graph by name, and every frontend for clients that do not go through the route.
		out["gpuCount"] = pulumi.Int(c.GPUs() * c.GraphCount())
		// Plain arrays: their values resolve to []any, as the engine keeps them.
		var graphs, urls pulumi.Array
		var wait []string
		for i, g := range d.Graphs {
			gc := c.Graph(i)
			url := pulumi.Sprintf("http://%s.%s.svc.cluster.local:%d", gc.FrontendServiceName(), d.Namespace, port)
			urls = append(urls, url)
			wait = append(wait, "dynamographdeployment/"+gc.GraphName)
			entry := pulumi.Map{
				"name":                 g.Name,
				"frontendService":      pulumi.String(gc.FrontendServiceName()),
				"frontendUrl":          url,
				"computeDomain":        pulumi.String(gc.ComputeDomainName()),
				"channelClaimTemplate": pulumi.String(gc.ChannelClaimTemplateName()),
				"readyGeneration":      g.ReadyGeneration,
			}
			if g.SmokeTest != nil {
				entry["smokeTest"] = g.SmokeTest.Result
			}
			graphs = append(graphs, entry)
		}
		out[GraphsOutput] = graphs
		out["frontendUrls"] = urls
		out["waitCommand"] = pulumi.Sprintf("kubectl -n %s wait --for=condition=Ready %s --timeout=%s", d.Namespace, strings.Join(wait, " "), c.Readiness.Timeout)
	}
	if c.Exposure.Enabled {
		// Where clients reach the model through the site's Gateway.
		out["externalUrl"] = d.ExternalURL
	}
	return out
}
