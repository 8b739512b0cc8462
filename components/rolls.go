package components

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// warnSurgingRolls logs SurgingRolls' warnings, on preview and up.
func warnSurgingRolls(ctx *pulumi.Context, c *config.Config, live, planned map[string]string) {
	for _, w := range manifest.SurgingRolls(c, live, planned) {
		_ = ctx.Log.Warn(w, nil)
	}
}
