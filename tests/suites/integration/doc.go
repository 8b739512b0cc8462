// Package integration runs the program through the real Pulumi engine and Kubernetes provider
// against a real kube-apiserver (started by controller-runtime's envtest) with the real Dynamo and
// ComputeDomain CRDs installed from $MINIMAX_M3_CRDS, and in the rack box (package rackbox), whose
// Kubernetes controllers, scheduler, Dynamo operator and compute-domain-controller run for real
// (the TestBox* tests: every test of a graph's lifecycle, the benchmark sweep's included).
//
// The plain API server runs no controllers. Where a test there needs one, it plays it and says so:
// the Job controller (marking the download Job complete or failed), an operator (marking the
// graph Ready) and the garbage collector (releasing foreground deletions).
package integration
