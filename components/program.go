package components

import (
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
)

// Program is the stack's Pulumi program. main.go runs it; the Automation API runs it inline.
func Program(ctx *pulumi.Context) error {
	outputs, err := Deploy(ctx)
	if err != nil {
		return err
	}
	for k, v := range outputs {
		ctx.Export(k, v)
	}
	return nil
}

// Deploy reads the stack's config, builds every resource and returns the stack outputs.
func Deploy(ctx *pulumi.Context) (pulumi.Map, error) {
	c, err := LoadConfig(ctx)
	if err != nil {
		// Nothing has been registered yet: bad config never touches a resource.
		return nil, err
	}
	if c.Speculative.Mode == config.SpeculativeSynthetic {
		_ = ctx.Log.Warn("BENCHMARK ONLY: speculativeDecoding.mode is synthetic: workers skip real EAGLE3 verification "+
			"(acceptance length "+formatFloat(c.Speculative.SyntheticAcceptanceLength)+"), so responses are not the model's. "+
			"Never serve production traffic or evaluate accuracy with it.", nil)
	}
	if dir := c.Kubernetes.RenderDirectory; dir != "" {
		msg := "rendering manifests to " + dir + " instead of applying them"
		if c.ModelDownload.Enabled && !c.HuggingFace.ExistingSecret {
			msg += "; the rendered Secret holds the Hugging Face token in plain text: keep that directory private and out of version control"
		}
		_ = ctx.Log.Warn(msg, nil)
	}

	provider, err := kubernetes.NewProvider(ctx, "kubernetes", &kubernetes.ProviderArgs{
		Context:               optionalString(c.Kubernetes.Context),
		RenderYamlToDirectory: optionalString(c.Kubernetes.RenderDirectory),
	})
	if err != nil {
		return nil, err
	}
	d, err := NewMiniMaxM3(ctx, c.GraphName, &c, pulumi.Provider(provider))
	if err != nil {
		return nil, err
	}
	return Outputs(&c, d), nil
}

// LoadConfig reads and validates the stack's `minimax-m3:` config.
func LoadConfig(ctx *pulumi.Context) (config.Config, error) {
	raw := config.Raw{Values: map[string]string{}, Secrets: map[string]bool{}}
	for _, k := range config.Keys() {
		full := config.Key(k)
		if v, ok := ctx.GetConfig(full); ok {
			raw.Values[k] = v
			raw.Secrets[k] = ctx.IsConfigSecret(full)
		}
	}
	return config.Parse(raw)
}
