package main

import (
	"fmt"
	"os"

	"minimax-m3/config"
)

func main() {
	b, err := config.StackFileSchema("config")
	if err == nil {
		err = os.WriteFile(config.SchemaFile, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "configschema:", err)
		os.Exit(1)
	}
}
