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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/config"
	"minimax-m3/portal"
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
	installSite(t) // team-b's namespace and RoleBinding; team-c's namespace, with no binding for team-b
	m := newPortalWith(t, box.Kubeconfig, t.TempDir(), "portal-tests", func(o *portal.Options) {
		o.Impersonate = true
		o.ImageRegistries = append(slices.Clone(config.DefaultImageRegistries), rackbox.Registry)
	})
	bob := portal.RunOptions{Identity: portal.Identity{User: "bob@team-b", Groups: []string{"team-b"}}}

	rack := addRack(t, rackbox.NVL72("nvl72-team-b").WithGPUs(12))
	request := func(stack, ns string) portal.Request {
		r := portalRequest("agg", stack, ns)
		r.Config.Namespace.Create = false
		r.Config.Worker.Scheduling.RuntimeClassName = rackbox.WorkerRuntimeClass
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
	f, err := os.Open(filepath.Clean(box.AuditLog()))
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !json.Valid(sc.Bytes()) {
			continue // the last line, while the API server writes it
		}
		var e struct {
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
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		// The provider creates by server-side apply: a patch answered 201.
		if (e.Verb != "create" && e.Verb != "patch") || e.ObjectRef.Namespace != teamNS || e.ImpersonatedUser == nil || e.ResponseStatus.Code >= 300 {
			continue
		}
		assert.Contains(t, e.ImpersonatedUser.Groups, "team-b")
		created[e.ObjectRef.Resource+"/"+e.ObjectRef.Name] = e.ImpersonatedUser.Username
	}
	require.NoError(t, sc.Err())
	for _, obj := range []string{"secrets/hf-token-secret", "persistentvolumeclaims/shared-model-cache", "jobs/minimax-m3-model-download",
		"configmaps/" + aggGraph + "-config", "dynamographdeployments/" + aggGraph, "networkpolicies/" + aggGraph + "-isolation"} {
		assert.Equal(t, "bob@team-b", created[obj], "the audit log names bob for %s (got %v)", obj, created)
	}
}
