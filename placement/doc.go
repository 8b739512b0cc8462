// Package placement decides which NVLink clique a graph's workers go to on a shared GB200 pool.
//
// It reads nothing itself: given the pool's nodes and the pods that hold their resources (the
// caller lists them, internal/cluster.Reader.Pool), it filters nodes as the scheduler would for
// each worker (node selector and required node affinity, NoSchedule/NoExecute taints against the
// worker's tolerations, cordon, Ready), counts each node's free resources (allocatable less the
// requests of every bound, unfinished pod that is not the graph's own), and fits the workers into
// each clique largest first. A GPU taint named like the extended resource a worker requests counts
// as tolerated, as the ExtendedResourceToleration admission plugin makes it. The pre-deploy checks
// (package preflight) pin the graph to the clique chosen, or refuse with Result.Table when none
// holds every worker.
//
// It sits below components and internal/cluster and imports only Kubernetes' own packages (the
// scheduler's helpers from k8s.io/component-helpers).
package placement
