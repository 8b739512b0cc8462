//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	// Built only on a machine without kubectl, which envtest needs beside the servers.
	_ "k8s.io/kubernetes/cmd/kubectl"
)
