//go:build tools

package tools

import (
	_ "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	// The provider's generate step stamps the version into its embedded schema.
	_ "github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)
