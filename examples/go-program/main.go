// Command go-program is a Pulumi program of a platform team's own that deploys MiniMax M3 with the
// Deployment component (docs/package.md): its own Kubernetes provider, the recipe's defaults with
// the site's values, the token from its own config.
package main

import (
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumiconfig "github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	"minimax-m3/components"
	"minimax-m3/config"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		site, err := kubernetes.NewProvider(ctx, "site", &kubernetes.ProviderArgs{
			// Update the speculative ConfigMap and the token Secret in place, as the program's own
			// provider does.
			EnableConfigMapMutable: pulumi.Bool(true),
			EnableSecretMutable:    pulumi.Bool(true),
		})
		if err != nil {
			return err
		}
		c := config.Defaults(config.Aggregated) // the recipe's values; change what differs
		c.Namespace.Name = "team-a"
		c.ModelCache.StorageClass = "rwx-fast"
		c.Worker.Scheduling.NodeSelector = map[string]string{"pool": "gb200"}
		m3, err := components.NewDeployment(ctx, "m3", &components.DeploymentArgs{
			Config:  c,
			HFToken: pulumiconfig.RequireSecret(ctx, "hfToken"),
		}, pulumi.Provider(site))
		if err != nil {
			return err
		}
		outputs := components.Outputs(&c, m3)
		for _, k := range []string{"frontendUrl", "portForwardCommand", "smokeTest"} {
			if v, ok := outputs[k]; ok {
				ctx.Export(k, v)
			}
		}
		return nil
	})
}
