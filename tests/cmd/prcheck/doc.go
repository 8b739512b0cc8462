// Command prcheck answers a reviewer's question offline: what will this change do to a live stack?
//
// It starts the local API server with the real CRDs (or uses the cluster of -kubeconfig, which
// must serve them), deploys each stack from the BASE commit's
// program and stack files (awaits off, as in `make local`), then previews the head (the working
// tree, uncommitted changes included, or another commit) against that live state through the
// Pulumi CLI with --diff. Per stack it prints the resources and fields that change, whether each
// graph component's pods roll, and the policies' verdict; it fails when a change would replace or
// delete the model cache claim, the namespace or an adopted object, when a policy is broken, or
// when a component rolls that -roll does not name.
//
// On a cluster of -kubeconfig, each stack deploys into a namespace that must not exist yet
// (-namespace-prefix and the stack's name), and stays there after the check: the check's state is
// discarded with its work folder, so deleting those namespaces removes what it made. Give it an
// API server without the Dynamo operator: where controllers run, the base deployment is live (the
// operator starts its workers, the download Job runs with a placeholder token).
//
//	cd tests && go run ./cmd/prcheck -base origin/main -roll DecodeWorker
package main
