package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/components"
)

func main() { pulumi.Run(components.Program) }
