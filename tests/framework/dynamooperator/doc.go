// Package dynamooperator runs the real Dynamo operator (built by `make toolchain` from its source)
// as a local process against a local API server, for tests that let it decide what becomes of a
// DynamoGraphDeployment.
//
// Off-cluster, the operator needs what its Deployment would give it, and nothing is written to a
// system path of the machine:
//   - its configuration file (OperatorConfiguration): free ports on 127.0.0.1 for metrics, health
//     and webhook; webhook certificates in manual mode, made by envtest as for any local webhook
//     server; no leader election; the MPI ssh Secret fields it requires;
//   - its namespace, which it reads from the in-cluster service-account path
//     (/var/run/secrets/kubernetes.io/serviceaccount/namespace): the process runs in a private
//     user and mount namespace (`unshare`) where a temporary folder is bound over /run;
//   - in the cluster: the CRDs of its own folder the API server lacks (dynamocheckpoints, which it
//     watches), its namespace, the webhook certificate Secret holding the CA (it waits for the CA
//     bundle before starting) and the ClusterRoles its configuration names;
//   - conversions: the API server converts its kinds between versions through its webhook, which
//     the CRDs name by Service; once it runs they name its local URL instead (serveConversions),
//     and Stop puts the CRDs back as they were.
package dynamooperator
