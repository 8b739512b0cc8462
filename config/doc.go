// Package config holds the typed configuration of a minimax-m3 stack: the recipe's portable values as
// defaults per profile (defaults.go, the one place they live), the site values a platform engineer
// adds with `pulumi config set`, and the validation beside each type that rejects bad input before
// any resource is touched.
//
// StackFileSchema generates the stack files' JSON Schema from these types (cmd/configschema writes
// it to SchemaFile).
//
// It is pure Go: no Pulumi resources and no Outputs, so it is tested with plain Go tests.
package config
