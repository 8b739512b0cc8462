//go:build tools

package tools

import (
	_ "sigs.k8s.io/dra-driver-nvidia-gpu/cmd/compute-domain-controller"

	// The local control plane's commands (tools/kubernetes): required here too, so every module
	// both builds share resolves to the same version and their compiled packages are shared.
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
