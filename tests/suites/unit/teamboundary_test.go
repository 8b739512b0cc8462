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
	for _, tc := range []struct {
		args teamboundary.SiteArgs
		want string
	}{
		{teamboundary.SiteArgs{Teams: map[string][]string{"a": {"x"}}, WorkerRuntimeClass: "nvidia", Workspaces: "Pulumi"}, `workspaces: "Pulumi" is not a namespace name`},
		{teamboundary.SiteArgs{Teams: map[string][]string{"a": {"x"}}, WorkerRuntimeClass: "nvidia", Workspaces: "kube-system"}, `workspaces: "kube-system" is one of Kubernetes' own`},
		{teamboundary.SiteArgs{Teams: map[string][]string{"a": {"x", "stacks"}}, WorkerRuntimeClass: "nvidia", Workspaces: "stacks"}, "workspaces: namespace stacks is team a's"},
		{teamboundary.SiteArgs{Teams: map[string][]string{"portal": {"x"}}, WorkerRuntimeClass: "nvidia", Workspaces: "stacks",
			Portal: &rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "stacks", Name: "minimax-m3-portal"}}, "teams.portal: the workspace ServiceAccount stacks/minimax-m3-portal is the portal's identity"},
		{teamboundary.SiteArgs{Teams: map[string][]string{"oidc:team-a": {"x"}}, WorkerRuntimeClass: "nvidia"}, "teams.oidc:team-a: a team's name is a label value"},
	} {
		_, err := teamboundary.Objects(tc.args)
		assert.ErrorContains(t, err, tc.want)
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

// A namespace the stack creates enforces baseline where the site's install is found, its workers
// on the class the site's pod policy names (unless they name one); privileged where it is not.
// Baseline asked for with no class to give the workers is refused at namespace.podSecurity before
// anything is registered; the site's class on a pod that is not a worker, at that pod's key. A
// namespace the stack uses gives its workers the class its annotation names.
func TestTheStacksNamespaceFollowsTheSite(t *testing.T) {
	site := fakeCluster{"validatingadmissionpolicies//" + config.SitePodPolicy: {"@" + config.WorkerRuntimeClassAnnotation: "nvidia-exempt"}}
	for _, stack := range []string{"agg", "disagg"} {
		r, err := runOn(t, site, stack, nil)
		require.NoError(t, err)
		labels := decode[map[string]string](t, r.one(t, "kubernetes:core/v1:Namespace"), "metadata", "labels")
		assert.Equal(t, "baseline", labels["pod-security.kubernetes.io/enforce"], "%v", labels)
		assert.Equal(t, "baseline", labels[config.PodPolicyLabel], "the site's policies bind it")
		annotations := decode[map[string]string](t, r.one(t, "kubernetes:core/v1:Namespace"), "metadata", "annotations")
		assert.Equal(t, "nvidia-exempt", annotations[config.WorkerRuntimeClassAnnotation], "it names the workers' class for other stacks in it")
		workers := graphSpec(t, r).Components[1:]
		require.NotEmpty(t, workers)
		for _, w := range workers {
			require.NotNil(t, w.PodTemplate.Spec.RuntimeClassName, w.Name)
			assert.Equal(t, "nvidia-exempt", *w.PodTemplate.Spec.RuntimeClassName, w.Name)
		}
		assert.Nil(t, graphSpec(t, r).Components[0].PodTemplate.Spec.RuntimeClassName, "the frontend takes no exempt class")
	}

	// The stack's own choice stands: privileged, or the workers' own class.
	r, err := runOn(t, site, "agg", map[string]string{"minimax-m3:namespace": `{"name": "inference", "podSecurity": "privileged"}`})
	require.NoError(t, err)
	labels := decode[map[string]string](t, r.one(t, "kubernetes:core/v1:Namespace"), "metadata", "labels")
	assert.Equal(t, "privileged", labels["pod-security.kubernetes.io/enforce"])
	assert.NotContains(t, labels, config.PodPolicyLabel)
	r, err = runOn(t, site, "agg", map[string]string{"minimax-m3:worker": `{"scheduling": {"runtimeClassName": "gpu"}}`})
	require.NoError(t, err)
	assert.Equal(t, "gpu", *graphSpec(t, r).Components[1].PodTemplate.Spec.RuntimeClassName)

	// Baseline with no site to name the class, and no class of the workers' own: refused.
	_, err = runOn(t, fakeCluster{}, "disagg", map[string]string{"minimax-m3:namespace": `{"name": "inference", "podSecurity": "baseline"}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:namespace.podSecurity: baseline refuses the workers' capabilities (IPC_LOCK, SYS_PTRACE, SYS_RESOURCE) unless the API server exempts their RuntimeClass, and prefillWorker.scheduling.runtimeClassName is empty")
	// The site's class on the frontend: refused at its key.
	_, err = runOn(t, site, "agg", map[string]string{"minimax-m3:frontend": `{"scheduling": {"runtimeClassName": "nvidia-exempt"}}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `minimax-m3:frontend.scheduling.runtimeClassName: "nvidia-exempt" is the GPU workers' RuntimeClass`)

	// A second stack in a baseline namespace the site's policy binds: the site's class.
	shared := fakeCluster{
		"validatingadmissionpolicies//" + config.SitePodPolicy: {"@" + config.WorkerRuntimeClassAnnotation: "nvidia-exempt"},
		"namespaces//shared": {"pod-security.kubernetes.io/enforce": "baseline", config.PodPolicyLabel: "baseline"},
	}
	r, err = runOn(t, shared, "disagg", map[string]string{"minimax-m3:namespace": `{"name": "shared", "create": false}`})
	require.NoError(t, err)
	for _, w := range graphSpec(t, r).Components[1:] {
		assert.Equal(t, "nvidia-exempt", *w.PodTemplate.Spec.RuntimeClassName, w.Name)
	}

	// A team namespace the site handed out: its annotation names the class.
	team := fakeCluster{"namespaces//team-a-prod": {"@" + config.WorkerRuntimeClassAnnotation: "nvidia-exempt"}}
	r, err = runOn(t, team, "agg", map[string]string{"minimax-m3:namespace": `{"name": "team-a-prod", "create": false}`})
	require.NoError(t, err)
	assert.Equal(t, "nvidia-exempt", *graphSpec(t, r).Components[1].PodTemplate.Spec.RuntimeClassName)
}
