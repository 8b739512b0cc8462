// Package pulumipackage makes the Deployment component a Pulumi package other programs use in
// any language: its schema, generated from the config package's Go types, and the Construct that
// builds a Deployment from a program's inputs through components.NewDeployment. The package's
// second resource, Site (teamboundary.SiteToken), is what a site installs once per cluster
// (teamboundary.NewSite): its inputs are read by SiteArgs.
//
// The plugin is the main package in provider/ (with PulumiPlugin.yaml), so `pulumi package add
// <this repository>/provider` adds it as a source-based package: the Go language host builds it
// when a program first needs it. Its schema is kept in provider/schema.json (`go run
// ./cmd/configschema` writes it; a unit test checks it against the Go types).
//
// Imports run one way: pulumipackage imports components, teamboundary and config; only provider/
// imports it.
package pulumipackage
