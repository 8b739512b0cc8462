package teamboundary

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the site's roles.
const (
	// TeamRole is what a team may do in its own namespaces (bound there per team by TeamBinding).
	TeamRole = "minimax-m3-team"
	// FleetReaderRole is what every team's checks read across the fleet: the nodes and the pods on
	// them (the placement check counts the GPUs other teams use), the cluster's devices, the
	// Gateways and routes a route attaches beside. Never a Secret, never a write.
	FleetReaderRole = "minimax-m3-fleet-reader"
	// ImpersonatorRole lets the portal act as the teams' users and groups.
	ImpersonatorRole = "minimax-m3-portal-impersonator"
)

var write = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
var read = []string{"get", "list", "watch"}

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      rules,
	}
}

// TeamClusterRole is TeamRole: the objects a stack writes in its namespace, and what its checks
// and waits read there (pods and their logs, events, the operator's objects).
func TeamClusterRole() *rbacv1.ClusterRole {
	return clusterRole(TeamRole,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps", "persistentvolumeclaims"}, Verbs: write},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "pods/log", "events", "services", "endpoints"}, Verbs: read},
		// The benchmark's helper pod, and the exec into it that reads its results.
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
		rbacv1.PolicyRule{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: write},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets", "statefulsets"}, Verbs: read},
		rbacv1.PolicyRule{APIGroups: []string{"nvidia.com"}, Resources: []string{"dynamographdeployments", "dynamographdeploymentscalingadapters"}, Verbs: write},
		rbacv1.PolicyRule{APIGroups: []string{"nvidia.com"}, Resources: []string{"dynamocomponentdeployments", "dynamographdeployments/status"}, Verbs: read},
		rbacv1.PolicyRule{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomains"}, Verbs: write},
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: read},
		rbacv1.PolicyRule{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: write},
		rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: write},
		rbacv1.PolicyRule{APIGroups: []string{"gateway.networking.k8s.io"}, Resources: []string{"httproutes"}, Verbs: write},
		rbacv1.PolicyRule{APIGroups: []string{"inference.networking.k8s.io"}, Resources: []string{"inferencepools"}, Verbs: read},
		rbacv1.PolicyRule{APIGroups: []string{"monitoring.coreos.com"}, Resources: []string{"podmonitors", "prometheusrules"}, Verbs: write},
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: write},
	)
}

// FleetReaderClusterRole is FleetReaderRole.
func FleetReaderClusterRole() *rbacv1.ClusterRole {
	return clusterRole(FleetReaderRole,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes", "pods", "namespaces"}, Verbs: read},
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices", "deviceclasses"}, Verbs: read},
		rbacv1.PolicyRule{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomaincliques"}, Verbs: read},
		rbacv1.PolicyRule{APIGroups: []string{"gateway.networking.k8s.io"}, Resources: []string{"gateways", "httproutes"}, Verbs: read},
		rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: read},
		// The site's pod policy, whose annotation names the workers' RuntimeClass.
		rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies"}, ResourceNames: []string{PolicyName}, Verbs: []string{"get"}},
	)
}

// ImpersonatorClusterRole is ImpersonatorRole: impersonating the teams' groups (named) and any user
// name (a portal's users are its own list, not the cluster's). It is what the portal's identity
// needs besides nothing: every other right it uses is the team's.
func ImpersonatorClusterRole(groups []string) *rbacv1.ClusterRole {
	return clusterRole(ImpersonatorRole,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"groups"}, Verbs: []string{"impersonate"}, ResourceNames: groups},
	)
}

// TeamBinding grants team's group, and the team's other subjects (its workspace ServiceAccount),
// TeamRole in one of its namespaces: without it the API server refuses every write of the team
// there, whatever the portal would allow.
func TeamBinding(team, namespace string, others ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: TeamRole, Namespace: namespace, Labels: map[string]string{TeamLabel: team}},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: TeamRole},
		Subjects:   append(Groups(team), others...),
	}
}

// ClusterBinding binds a ClusterRole cluster-wide to subjects.
func ClusterBinding(role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

// WorkspaceServiceAccount is a team's identity in the Pulumi Kubernetes Operator's workspace
// namespace (SiteArgs.Workspaces): the account a team's workspace pods run as (pko.Runner acting as
// the team), bound where the team's group is.
func WorkspaceServiceAccount(team string) string { return "minimax-m3-" + team }

// serviceAccount is a team's workspace ServiceAccount.
func serviceAccount(team, namespace string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: WorkspaceServiceAccount(team), Namespace: namespace, Labels: map[string]string{TeamLabel: team}},
	}
}

// AuthDelegatorBinding is the name of the binding that lets the teams' workspace accounts check who
// calls their workspace pod (the operator's requirement of a workspace's account).
const AuthDelegatorBinding = "minimax-m3-workspaces-auth-delegator"

// Groups are subjects for team groups.
func Groups(teams ...string) []rbacv1.Subject {
	out := make([]rbacv1.Subject, len(teams))
	for i, t := range teams {
		out[i] = rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: t}
	}
	return out
}
