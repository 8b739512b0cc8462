// Command render writes every object a stack would apply as YAML into a directory, with no cluster:
// the review artefact for GitOps, like `kustomize build`.
//
//	go run ./cmd/render -stack agg -out /tmp/minimax-m3-agg -set minimax-m3:namespace.name=inference
package main
