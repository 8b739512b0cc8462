package components

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
)

// MiniMaxM3 is one stack's deployment: namespace, token Secret, model cache, ComputeDomain and the
// Dynamo graph, wired so the graph is created only once the model is in the cache.
type MiniMaxM3 struct {
	pulumi.ResourceState

	Namespace       pulumi.StringOutput `pulumi:"namespace"`
	GraphName       pulumi.StringOutput `pulumi:"graphName"`
	FrontendService pulumi.StringOutput `pulumi:"frontendService"`
	CacheClaimName  pulumi.StringOutput `pulumi:"cacheClaimName"`
	ComputeDomain   pulumi.StringOutput `pulumi:"computeDomain"`
}

// NewMiniMaxM3 builds every object of a stack from a validated Config.
func NewMiniMaxM3(ctx *pulumi.Context, name string, c *config.Config, opts ...pulumi.ResourceOption) (*MiniMaxM3, error) {
	d := &MiniMaxM3{}
	if err := ctx.RegisterComponentResource("minimax-m3:index:Deployment", name, d, opts...); err != nil {
		return nil, err
	}
	parent := pulumi.Parent(d)

	ns, err := NewNamespace(ctx, name+"-namespace", &NamespaceArgs{
		Name:   c.Namespace.Name,
		Create: c.Namespace.Create,
		// A namespace that holds a kept cache claim is kept too, or deleting it would take the claim.
		RetainOnDelete: c.ModelCache.Create && !c.ModelCache.DeleteOnDestroy,
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
	}
	if c.ModelDownload.Enabled {
		tokenArgs := &HFTokenSecretArgs{Namespace: ns.Name, SecretName: c.HuggingFace.SecretName}
		if !c.HuggingFace.ExistingSecret {
			tokenArgs.Token = pulumi.String(c.HFToken) // NewHFTokenSecret keeps it secret
		}
		token, err := NewHFTokenSecret(ctx, name+"-hf-token", tokenArgs, parent)
		if err != nil {
			return nil, err
		}
		cacheArgs.HFTokenSecret = token.SecretName
	}
	cache, err := NewModelCache(ctx, name+"-model-cache", cacheArgs, parent)
	if err != nil {
		return nil, err
	}

	cd, err := NewComputeDomain(ctx, name+"-compute-domain", &ComputeDomainArgs{
		Namespace:            ns.Name,
		Name:                 c.ComputeDomainName(),
		ChannelClaimTemplate: c.ChannelClaimTemplateName(),
		Create:               c.ComputeDomain.Create,
	}, parent)
	if err != nil {
		return nil, err
	}

	graph, err := NewGraph(ctx, name+"-graph", &GraphArgs{Namespace: ns.Name, Config: c},
		parent, pulumi.DependsOn(append([]pulumi.Resource{cd}, cache.Ready...)))
	if err != nil {
		return nil, err
	}

	d.Namespace = ns.Name
	d.GraphName = graph.Name
	d.FrontendService = graph.Name.ApplyT(func(n string) string { return n + "-frontend" }).(pulumi.StringOutput)
	d.CacheClaimName = cache.ClaimName
	d.ComputeDomain = cd.Name
	return d, ctx.RegisterResourceOutputs(d, pulumi.Map{
		"namespace":       d.Namespace,
		"graphName":       d.GraphName,
		"frontendService": d.FrontendService,
		"cacheClaimName":  d.CacheClaimName,
		"computeDomain":   d.ComputeDomain,
	})
}

// Outputs are the stack outputs: where the frontend is and how to reach it.
func Outputs(c *config.Config, d *MiniMaxM3) pulumi.Map {
	port := c.Frontend.HTTPPort
	chat := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"What is 2 + 2?"}],"max_tokens":1024}`, c.Model.ServedModelName)
	return pulumi.Map{
		"namespace":            d.Namespace,
		"graphName":            d.GraphName,
		"frontendService":      d.FrontendService,
		"frontendPort":         pulumi.Int(port),
		"frontendUrl":          pulumi.Sprintf("http://%s.%s.svc.cluster.local:%d", d.FrontendService, d.Namespace, port),
		"portForwardCommand":   pulumi.Sprintf("kubectl -n %s port-forward service/%s %d:%d", d.Namespace, d.FrontendService, port, port),
		"smokeTestModels":      pulumi.String(fmt.Sprintf("curl --fail-with-body http://localhost:%d/v1/models", port)),
		"smokeTestChat":        pulumi.String(fmt.Sprintf("curl --fail-with-body http://localhost:%d/v1/chat/completions -H 'Content-Type: application/json' -d '%s'", port, chat)),
		"gpuCount":             pulumi.Int(c.GPUs()),
		"model":                pulumi.String(c.Model.Name),
		"modelRevision":        pulumi.String(c.Model.Revision),
		"draftModel":           pulumi.String(c.Model.Draft.Name),
		"draftRevision":        pulumi.String(c.Model.Draft.Revision),
		"speculativeMode":      pulumi.String(string(c.Speculative.Mode)),
		"computeDomain":        d.ComputeDomain,
		"channelClaimTemplate": pulumi.String(c.ChannelClaimTemplateName()),
		"cacheClaimName":       d.CacheClaimName,
		"waitCommand":          pulumi.Sprintf("kubectl -n %s wait --for=condition=Ready dynamographdeployment/%s --timeout=%s", d.Namespace, d.GraphName, c.Readiness.Timeout),
	}
}
