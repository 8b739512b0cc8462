package portal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
)

// With Impersonate, an operation's kubeconfig is the portal's with every user impersonating the
// request's user and groups, written in the stack's workspace only for the portal (0600); an
// operation with no user to act for is refused before it holds the stack.
func TestTheOperationsKubeconfigImpersonatesItsUser(t *testing.T) {
	dir := t.TempDir()
	portalKubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(portalKubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users:
- {name: portal, user: {token: portal-token, as: someone-else, as-groups: [system:masters]}}
- {name: spare, user: {token: spare-token}}
contexts: [{name: c, context: {cluster: c, user: portal}}]
current-context: c
`), 0o600))
	m := NewTestManagerWith(t, func(o *Options) {
		o.Impersonate = true
		o.EnvVars = map[string]string{"KUBECONFIG": portalKubeconfig}
	})
	path, err := m.impersonatingKubeconfig(workspace("team-b-agg"), Identity{User: "bob@team-b", Groups: []string{"team-b"}})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(m.o.StateDir, "workspaces", "team-b-agg", "kubeconfig"), path)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	cfg, err := clientcmd.LoadFromFile(path)
	require.NoError(t, err)
	require.Len(t, cfg.AuthInfos, 2)
	for name, ai := range cfg.AuthInfos {
		assert.Equal(t, "bob@team-b", ai.Impersonate, name)
		assert.Equal(t, []string{"team-b"}, ai.ImpersonateGroups, "%s: the request's groups replace the kubeconfig's own", name)
	}
	assert.Equal(t, "portal-token", cfg.AuthInfos["portal"].Token, "the portal's credentials, acting as bob")

	for _, op := range []func() error{
		func() error { return m.Destroy(context.Background(), "team-b-agg", false, RunOptions{}) },
		func() error { _, err := m.Refresh(context.Background(), "team-b-agg", RunOptions{}); return err },
		func() error {
			r := NewRequest("agg", "team-b-agg")
			r.Config.Namespace.Name, r.HFToken = "team-b", "hf_token_of_team_b_0123456789"
			_, err := m.Up(context.Background(), r, RunOptions{})
			return err
		},
	} {
		assert.ErrorIs(t, op(), ErrNoIdentity)
	}
	assert.Empty(t, m.RunningStacks())
}
