package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"

	"minimax-m3/config"
	"minimax-m3/teamboundary"
)

// The site's objects: the policies first (so no namespace exists unguarded), then the roles, then
// each team's namespaces with their bindings; a namespace belongs to one team, and what the site
// must say is refused at its key.
func TestTheSiteInstallsThePoliciesBeforeTheTeamsNamespaces(t *testing.T) {
	objs, err := teamboundary.Objects(teamboundary.SiteArgs{
		Teams:              map[string][]string{"team-b": {"b-prod"}, "team-a": {"a-prod", "a-dev"}},
		WorkerRuntimeClass: "nvidia",
		PriorityClasses:    []string{"inference-high"},
		Portal:             &rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "portal"},
	})
	require.NoError(t, err)
	var got []string
	for _, o := range objs {
		m := o.(map[string]any)
		name := m["metadata"].(map[string]any)["name"].(string)
		if ns, ok := m["metadata"].(map[string]any)["namespace"].(string); ok {
			name = ns + "/" + name
		}
		got = append(got, m["kind"].(string)+" "+name)
	}
	assert.Equal(t, []string{
		"ValidatingAdmissionPolicy minimax-m3-team-pods", "ValidatingAdmissionPolicyBinding minimax-m3-team-pods",
		"ValidatingAdmissionPolicy minimax-m3-team-graphs", "ValidatingAdmissionPolicyBinding minimax-m3-team-graphs",
		"ClusterRole minimax-m3-team", "ClusterRole minimax-m3-fleet-reader", "ClusterRoleBinding minimax-m3-fleet-reader",
		"ClusterRole minimax-m3-portal-impersonator", "ClusterRoleBinding minimax-m3-portal-impersonator",
		"Namespace a-prod", "RoleBinding a-prod/minimax-m3-team", "Namespace a-dev", "RoleBinding a-dev/minimax-m3-team",
		"Namespace b-prod", "RoleBinding b-prod/minimax-m3-team",
	}, got)
	ns := objs[9].(map[string]any)["metadata"].(map[string]any)
	assert.Equal(t, "baseline", ns["labels"].(map[string]any)["pod-security.kubernetes.io/enforce"], "a team's namespace enforces baseline, not privileged")
	assert.Equal(t, "team-a", ns["labels"].(map[string]any)[teamboundary.TeamLabel])
	assert.Equal(t, "baseline", ns["labels"].(map[string]any)[config.PodPolicyLabel], "the admission policies bind it")
	// The portal may impersonate the teams' groups, by name, and no other.
	impersonator := objs[7].(map[string]any)["rules"].([]any)[1].(map[string]any)
	assert.Equal(t, []any{"team-a", "team-b"}, impersonator["resourceNames"])

	for _, tc := range []struct {
		args teamboundary.SiteArgs
		want string
	}{
		{teamboundary.SiteArgs{WorkerRuntimeClass: "nvidia"}, "teams: name at least one team"},
		{teamboundary.SiteArgs{Teams: map[string][]string{"a": {"x"}}}, "workerRuntimeClass:"},
		{teamboundary.SiteArgs{Teams: map[string][]string{"a": {"x"}, "b": {"x"}}, WorkerRuntimeClass: "nvidia"}, "teams.b: namespace x is team a's already"},
		{teamboundary.SiteArgs{Teams: map[string][]string{"a": nil}, WorkerRuntimeClass: "nvidia"}, "teams.a: no namespace"},
	} {
		_, err := teamboundary.Objects(tc.args)
		assert.ErrorContains(t, err, tc.want)
	}
	{
		_, err := teamboundary.Objects(teamboundary.SiteArgs{Teams: map[string][]string{"a": {"x"}}, WorkerRuntimeClass: "nvidia", Workspaces: "Pulumi"})
		assert.ErrorContains(t, err, `workspaces: "Pulumi" is not a namespace name`)
	}
	// The admission policies bind by the policy label, which the namespaces stacks create at
	// baseline carry too.
	binding := objs[1].(map[string]any)["spec"].(map[string]any)["matchResources"].(map[string]any)["namespaceSelector"]
	assert.Equal(t, map[string]any{"matchExpressions": []any{map[string]any{"key": config.PodPolicyLabel, "operator": "Exists"}}}, binding)
	// The API server's Pod Security configuration exempts the workers' class only.
	assert.Contains(t, teamboundary.PodSecurityAdmissionConfiguration("nvidia"), "runtimeClasses: [nvidia]")
}

// With the operator's workspaces, each team gets a ServiceAccount there, bound where its group is:
// in its namespaces (TeamRole), across the fleet (the checks' reads) and as the operator requires
// of a workspace's account (system:auth-delegator); no other team's namespace binds it.
func TestTheSiteGivesEachTeamAWorkspaceAccount(t *testing.T) {
	objs, err := teamboundary.Objects(teamboundary.SiteArgs{
		Teams:              map[string][]string{"team-b": {"b-prod"}, "team-a": {"a-prod"}},
		WorkerRuntimeClass: "nvidia",
		Workspaces:         "pulumi-stacks",
	})
	require.NoError(t, err)
	byName := map[string]map[string]any{}
	for _, o := range objs {
		m := o.(map[string]any)
		meta := m["metadata"].(map[string]any)
		name := m["kind"].(string) + " " + meta["name"].(string)
		if ns, ok := meta["namespace"].(string); ok {
			name = m["kind"].(string) + " " + ns + "/" + meta["name"].(string)
		}
		byName[name] = m
	}
	account := func(team string) map[string]any {
		return map[string]any{"kind": "ServiceAccount", "name": teamboundary.WorkspaceServiceAccount(team), "namespace": "pulumi-stacks"}
	}
	require.Contains(t, byName, "ServiceAccount pulumi-stacks/minimax-m3-team-a")
	require.Contains(t, byName, "ServiceAccount pulumi-stacks/minimax-m3-team-b")
	group := func(team string) map[string]any {
		return map[string]any{"apiGroup": rbacv1.GroupName, "kind": "Group", "name": team}
	}
	assert.Equal(t, []any{group("team-a"), account("team-a")}, byName["RoleBinding a-prod/minimax-m3-team"]["subjects"])
	assert.Equal(t, []any{group("team-b"), account("team-b")}, byName["RoleBinding b-prod/minimax-m3-team"]["subjects"])
	assert.Equal(t, []any{group("team-a"), group("team-b"), account("team-a"), account("team-b")}, byName["ClusterRoleBinding minimax-m3-fleet-reader"]["subjects"])
	delegator := byName["ClusterRoleBinding "+teamboundary.AuthDelegatorBinding]
	assert.Equal(t, "system:auth-delegator", delegator["roleRef"].(map[string]any)["name"])
	assert.Equal(t, []any{account("team-a"), account("team-b")}, delegator["subjects"])
}
