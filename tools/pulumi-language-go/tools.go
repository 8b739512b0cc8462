//go:build tools

package tools

import _ "github.com/pulumi/pulumi/sdk/v3/go/pulumi-language-go"
