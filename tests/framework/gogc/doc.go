// Package gogc raises GOGC for a test run: the suite, the rack box's own test, `make local` and
// `make pr-check` call Raise before they start anything. What they start (kube-apiserver, etcd,
// the controllers, kwok, the Dynamo operator, the Pulumi CLI, the provider, the Go builds of the
// program) is mostly Go programs, and on 2 cores, with Go's default GOGC, collection was a quarter
// of the box's API server CPU; a warm `make test` spent a sixth to a quarter less CPU with it
// (docs/measurements.md). The Pulumi CLI the portal starts in a clean environment keeps GOGC too
// (automation.CleanEnviron).
package gogc
