// Package cluster reads a live cluster for the program with client-go, on the kubeconfig and
// context the Kubernetes provider uses: objects' metadata for the ownership check, a Job's
// termination message for the smoke test's result, the pool's nodes and the pods holding their
// resources for placement (Pool), and a DynamoGraphDeployment's status, its workload provider and
// what keeps its pods from running (unschedulable, image pulls, crash loops, OOM kills, the node
// under a pod NotReady or cordoned) while `up` waits for the graph.
//
// It holds the types those readers return (LiveObject, GraphFailure, PodProblem) and the
// functions that read them from an object (GraphFailureOf, ProblemsOf, NodeProblemOf), so package
// components can depend on the readers' interfaces without holding client code. It imports nothing of the
// project but internal/objwatch and placement (whose Pool it fills).
package cluster
