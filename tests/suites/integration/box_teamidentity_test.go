package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/config"
	"minimax-m3/portal"
	"minimax-m3/portal/pko"
	"minimax-m3/teamboundary"
	"minimax-m3/tests/framework/rackbox"
)

// The portal acts for a request's team at the box's API server (Options.Impersonate): its
// kubeconfig impersonates the user and the team's group, so RBAC decides what the team may write,
// the audit log names the user for each write, and a request for a namespace the team has no
// RoleBinding in fails at the API server. The portal's own grant check is not in play: the
// requests go to the Manager, below the HTTP layer that checks grants.
func TestBoxThePortalActsAsTheTeamAtTheAPIServer(t *testing.T) {
	parallelOnBox(t)
	rackBox(t)
	ctx := context.Background()
	const teamNS, otherNS = "box-guarded-b", "box-guarded-c"
	require.Contains(t, rackbox.TeamNamespaces, teamNS, "the box audits the team's namespace")
	m := newPortalWith(t, box.Kubeconfig, t.TempDir(), "portal-tests", func(o *portal.Options) {
		o.Impersonate = true
		o.ImageRegistries = append(slices.Clone(config.DefaultImageRegistries), rackbox.Registry)
	})
	bob := portal.RunOptions{Identity: portal.Identity{User: "bob@team-b", Groups: []string{"team-b"}}}

	rack := addRack(t, rackbox.NVL72("nvl72-team-b").WithGPUs(12))
	request := func(stack, ns string) portal.Request {
		r := portalRequest("agg", stack, ns)
		r.Config.Namespace.Create = false
		// On a rack of the test's own: the other tests' racks are theirs.
		r.Config.Worker.Scheduling.NodeSelector = map[string]string{rackbox.RackLabel: rack.Name}
		r.Config.Placement.TopologyKey = rackbox.CliqueLabel
		return r
	}
	// Into the team's namespace: written as bob.
	_, err := m.Up(ctx, request("team-b-agg", teamNS), bob)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_ = m.Destroy(ctx, "team-b-agg", true, bob)
	})

	// Into a namespace the team has no RoleBinding in: the API server refuses bob, before the
	// stack writes anything there.
	_, err = m.Up(ctx, request("team-b-c", otherNS), bob)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `User "bob@team-b" cannot`)
	assert.Contains(t, err.Error(), `in the namespace "`+otherNS+`"`)
	// A team with no binding at all, in the namespace of another: refused the same way.
	_, err = m.Up(ctx, request("team-c-b", teamNS), portal.RunOptions{Identity: portal.Identity{User: "carol@team-c", Groups: []string{"team-c"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `User "carol@team-c" cannot`)
	// Nor may carol destroy team-b's stack: the destroy acts as her, and the API server refuses.
	err = m.Destroy(ctx, "team-b-agg", false, portal.RunOptions{Identity: portal.Identity{User: "carol@team-c", Groups: []string{"team-c"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `User "carol@team-c" cannot`)
	var graphs unstructured.UnstructuredList
	graphs.SetGroupVersionKind(graphGVK.GroupVersion().WithKind(graphGVK.Kind + "List"))
	require.NoError(t, box.Client.List(ctx, &graphs, client.InNamespace(teamNS)))
	assert.Len(t, graphs.Items, 1, "team-b's graph is still there")
	var secrets corev1.SecretList
	require.NoError(t, box.Client.List(ctx, &secrets, client.InNamespace(otherNS)))
	assert.Empty(t, secrets.Items, "nothing was written for bob in team-c's namespace")

	// The API server's audit log names bob, through the portal's identity, for every object the
	// stack created in the team's namespace.
	created := map[string]string{} // resource/name: the impersonated user
	for _, e := range auditEvents(t) {
		// The provider creates by server-side apply: a patch answered 201.
		if (e.Verb != "create" && e.Verb != "patch") || e.ObjectRef.Namespace != teamNS || e.ImpersonatedUser == nil || e.ResponseStatus.Code >= 300 {
			continue
		}
		assert.Contains(t, e.ImpersonatedUser.Groups, "team-b")
		created[e.ObjectRef.Resource+"/"+e.ObjectRef.Name] = e.ImpersonatedUser.Username
	}
	for _, obj := range []string{"secrets/hf-token-secret", "persistentvolumeclaims/shared-model-cache", "jobs/minimax-m3-model-download",
		"configmaps/" + aggGraph + "-config", "dynamographdeployments/" + aggGraph, "networkpolicies/" + aggGraph + "-isolation"} {
		assert.Equal(t, "bob@team-b", created[obj], "the audit log names bob for %s (got %v)", obj, created)
	}
}

// auditEvent is what the tests read of an entry of the box's audit log.
type auditEvent struct {
	Verb      string `json:"verb"`
	ObjectRef struct {
		Resource, Namespace, Name string
	} `json:"objectRef"`
	User             struct{ Username string } `json:"user"`
	ImpersonatedUser *struct {
		Username string
		Groups   []string
	} `json:"impersonatedUser"`
	ResponseStatus struct{ Code int } `json:"responseStatus"`
}

// auditEvents reads the box's audit log as it is now.
func auditEvents(t *testing.T) []auditEvent {
	t.Helper()
	f, err := os.Open(filepath.Clean(box.AuditLog()))
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !json.Valid(sc.Bytes()) {
			continue // the last line, while the API server writes it
		}
		var e auditEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		out = append(out, e)
	}
	require.NoError(t, sc.Err())
	return out
}

// gateFunc is a pko.Gate of the test's.
type gateFunc func(ctx context.Context, r portal.Request, o portal.RunOptions) error

func (g gateFunc) Check(ctx context.Context, r portal.Request, o portal.RunOptions) error {
	return g(ctx, r, o)
}

// The operator runner acting as the team (ActAsTeam): the Stack's workspace pod runs as the
// team's own ServiceAccount from the site install, chosen by the site's label on the request's
// namespace, never for an identity outside that team, a namespace of no team or a team with no
// account. The workspace pod needs a kubelet and the operator, which the box does not run: its
// identity does not, so the test writes with a token the API server issues for the account the
// Stack names (TokenRequest), as the workspace's provider would. The API server lets it write in
// the team's namespace and read the fleet, refuses it another team's namespace, and its audit log
// names the account.
func TestBoxTheOperatorRunnerActsAsTheTeam(t *testing.T) {
	parallelOnBox(t)
	rackBox(t)
	ctx := context.Background()
	const teamNS, otherNS = "box-guarded-b", "box-guarded-c"
	installBoxPKOCRDs(t)
	kube, dyn := kubeClients(t, box.Kubeconfig)
	var gated []portal.Identity
	runner := &pko.Runner{Kube: kube, Dynamic: dyn, Namespace: boxWorkspaces, ActAsTeam: true,
		ProjectRepo: "https://git.example.com/platform/minimax-m3.git", Commit: "0123456789abcdef0123456789abcdef01234567",
		Image: workspaceImage,
		Gate: gateFunc(func(_ context.Context, _ portal.Request, o portal.RunOptions) error {
			gated = append(gated, o.Identity)
			return nil
		})}
	request := func(stack, ns string) portal.Request {
		r := portalRequest("agg", stack, ns)
		r.Config.Namespace.Create = false
		return r
	}
	bob := portal.Identity{User: "bob@team-b", Groups: []string{"team-b"}}
	stack, err := runner.Apply(ctx, request("team-b-pko", teamNS), pko.ApplyOptions{Identity: bob})
	require.NoError(t, err)
	t.Cleanup(func() { _ = runner.DeleteAs(context.Background(), "team-b-pko", bob) })
	account, _, _ := unstructured.NestedString(stack.Object, "spec", "workspaceTemplate", "spec", "serviceAccountName")
	assert.Equal(t, teamboundary.WorkspaceServiceAccount("team-b"), account)
	assert.Equal(t, "team-b", stack.GetLabels()[teamboundary.TeamLabel], "the Stack is team-b's")
	token, err := kube.CoreV1().Secrets(boxWorkspaces).Get(ctx, pko.TokenSecretName("team-b-pko"), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "team-b", token.Labels[teamboundary.TeamLabel], "and so is its token's Secret")
	assert.Equal(t, []portal.Identity{bob}, gated, "the Gate's preview acts for bob too")

	// Refused before anything is written: carol is not in team-b; nobody; a namespace of no team;
	// a team the site gave no workspace account.
	carol := portal.Identity{User: "carol@team-c", Groups: []string{"team-c"}}
	var notTheTeams *pko.NotTheTeamsError
	for _, tc := range []struct {
		stack, ns string
		id        portal.Identity
		want      string
	}{
		{"team-b-carol", teamNS, carol, "not in the team's group"},
		{"team-b-nobody", teamNS, portal.Identity{}, ""},
		{"team-b-default", "default", bob, "not a team's namespace"},
	} {
		_, err := runner.Apply(ctx, request(tc.stack, tc.ns), pko.ApplyOptions{Identity: tc.id})
		require.Error(t, err, tc.stack)
		if tc.want == "" {
			require.ErrorIs(t, err, portal.ErrNoIdentity)
		} else {
			require.ErrorAs(t, err, &notTheTeams)
			assert.Contains(t, err.Error(), tc.want)
		}
		_, err = dyn.Resource(pko.StackResource).Namespace(boxWorkspaces).Get(ctx, tc.stack, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "nothing written for %s", tc.stack)
	}
	// Another team cannot take team-b's Stack over by naming it, nor delete it; and acting as
	// teams, the runner deletes for no one.
	_, err = runner.Apply(ctx, request("team-b-pko", otherNS), pko.ApplyOptions{Identity: carol})
	require.ErrorAs(t, err, &notTheTeams)
	assert.Contains(t, err.Error(), `Stack `+boxWorkspaces+`/team-b-pko is team "team-b"'s`)
	require.ErrorAs(t, runner.DeleteAs(ctx, "team-b-pko", carol), &notTheTeams)
	require.ErrorIs(t, runner.Delete(ctx, "team-b-pko"), portal.ErrNoIdentity)
	stack, err = dyn.Resource(pko.StackResource).Namespace(boxWorkspaces).Get(ctx, "team-b-pko", metav1.GetOptions{})
	require.NoError(t, err, "team-b's Stack is still there")
	account, _, _ = unstructured.NestedString(stack.Object, "spec", "workspaceTemplate", "spec", "serviceAccountName")
	assert.Equal(t, teamboundary.WorkspaceServiceAccount("team-b"), account, "and still runs as team-b")

	noAccount := *runner
	noAccount.Namespace = "default"
	_, err = noAccount.Apply(ctx, request("team-b-elsewhere", teamNS), pko.ApplyOptions{Identity: bob})
	require.ErrorAs(t, err, &notTheTeams)
	assert.Contains(t, err.Error(), "the team has no workspace ServiceAccount default/"+account)
	assert.Len(t, gated, 1, "no refused request reached the Gate")

	// The workspace's identity at the API server.
	tok, err := kube.CoreV1().ServiceAccounts(boxWorkspaces).CreateToken(ctx, account, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := rest.AnonymousClientConfig(restConfigOf(t, box.Kubeconfig))
	cfg.BearerToken = tok.Status.Token
	workspace, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "workspace-probe"}, Data: map[string]string{"by": "team-b's workspace"}}
	_, err = workspace.CoreV1().ConfigMaps(teamNS).Create(ctx, probe, metav1.CreateOptions{})
	require.NoError(t, err, "the team's workspace writes in the team's namespace")
	t.Cleanup(func() {
		_ = kube.CoreV1().ConfigMaps(teamNS).Delete(context.Background(), probe.Name, metav1.DeleteOptions{})
	})
	_, err = workspace.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	require.NoError(t, err, "and reads the fleet, as the placement check does")
	user := "system:serviceaccount:" + boxWorkspaces + ":" + account
	_, err = workspace.CoreV1().ConfigMaps(otherNS).Create(ctx, probe, metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "another team's namespace: %v", err)
	assert.Contains(t, err.Error(), `User "`+user+`" cannot create resource "configmaps"`)
	_, err = workspace.CoreV1().Secrets(otherNS).List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "nor read its Secrets: %v", err)
	review, err := workspace.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.True(t, review.Status.Allowed, "the operator's requirement of a workspace account (system:auth-delegator)")

	// The API server writes its audit entry as it answers: read until it is there.
	eventually(t, time.Minute, "the audit log names the team's workspace account", func(context.Context) (bool, error) {
		for _, e := range auditEvents(t) {
			if e.Verb == "create" && e.ObjectRef.Namespace == teamNS && e.ObjectRef.Name == probe.Name && e.ResponseStatus.Code < 300 {
				return e.User.Username == user, nil
			}
		}
		return false, nil
	})
}
