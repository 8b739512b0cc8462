// Command pulumi-resource-minimax-m3 is the minimax-m3 Pulumi package's plugin: `pulumi package
// add <repository>/provider` adds it, and the Go language host builds and starts it (runtime: go
// in PulumiPlugin.yaml) when a program uses the package. Package pulumipackage holds its logic.
package main

import (
	_ "embed"
	"fmt"
	"os"

	"minimax-m3/pulumipackage"
)

// schema is the package's schema, generated from the config's Go types (go run ./cmd/configschema).
//
//go:embed schema.json
var schema []byte

func main() {
	if err := pulumipackage.Main(schema); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
