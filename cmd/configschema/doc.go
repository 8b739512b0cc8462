// Command configschema writes the stack files' JSON Schema (schema/stack-config.schema.json) from
// the Go types of package config. Run it from the project's root after changing a config type:
//
//	go run ./cmd/configschema
//
// A unit test fails while the checked-in schema differs from what it would write. Editors that
// read JSON Schema (the YAML language server: a `# yaml-language-server: $schema=…` line at the
// top of a stack file) then check Pulumi.<stack>.yaml as it is typed.
package main
