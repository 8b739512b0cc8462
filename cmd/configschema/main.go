// Command configschema writes the schemas generated from the config's Go types: the stack files'
// JSON Schema (config.SchemaFile) and the Pulumi package's schema (pulumipackage.SchemaFile). Run
// it from the project's root after changing a config type; a unit test fails until it is run.
package main

import (
	"fmt"
	"os"

	"minimax-m3/config"
	"minimax-m3/pulumipackage"
)

func main() {
	if err := write(); err != nil {
		fmt.Fprintln(os.Stderr, "configschema:", err)
		os.Exit(1)
	}
}

func write() error {
	stack, err := config.StackFileSchema("config")
	if err != nil {
		return err
	}
	if err := os.WriteFile(config.SchemaFile, stack, 0o644); err != nil {
		return err
	}
	pkg, err := pulumipackage.Schema("config")
	if err != nil {
		return err
	}
	return os.WriteFile(pulumipackage.SchemaFile, pkg, 0o644)
}
