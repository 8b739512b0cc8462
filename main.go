// Command minimax-m3 deploys MiniMax M3 NVFP4 on NVIDIA Dynamo and vLLM to GB200 NVL72 racks.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/components"
)

func main() { pulumi.Run(components.Program) }
