// Package localcluster starts a kube-apiserver and etcd on 127.0.0.1 with controller-runtime's
// envtest, installs CRDs from a folder, and writes a kubeconfig for Pulumi's Kubernetes provider.
// It serves the integration tests and the local run of the main job. Its clients and server speak
// without gzip, which on one host costs CPU on both sides and saves nothing.
package localcluster
