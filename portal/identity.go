package portal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
)

// Identity is who an operation acts for at the Kubernetes API server: the signed-in user and
// their groups (their team). With Options.Impersonate the portal's kubeconfig impersonates them
// for the operation's every request, the program's checks and the provider's writes alike: the
// API server's RBAC decides what the team may write, and its audit log names the user as well as
// the portal.
type Identity struct {
	User   string
	Groups []string
}

type identityKey struct{}

func withIdentity(ctx context.Context, id Identity) context.Context {
	if id.User == "" {
		return ctx
	}
	return context.WithValue(ctx, identityKey{}, id)
}

func identityOf(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// ErrNoIdentity refuses an operation that would act at the API server for nobody while the portal
// impersonates its users: it would otherwise act with the portal's own rights.
var ErrNoIdentity = errors.New("the portal impersonates its users at the Kubernetes API server, and this operation has no user to act for")

// impersonatingKubeconfig writes the portal's kubeconfig (EnvVars' KUBECONFIG, else the portal's
// own, else ~/.kube/config) into the stack's workspace with every user of it impersonating id, and
// returns its path (file mode 0600; its credentials are the portal's, as before).
func (m *Manager) impersonatingKubeconfig(dir string, id Identity) (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kc := m.o.EnvVars["KUBECONFIG"]; kc != "" {
		rules.Precedence = filepath.SplitList(kc)
	}
	cfg, err := rules.Load()
	if err != nil {
		return "", fmt.Errorf("reading the portal's kubeconfig to impersonate %s: %w", id.User, err)
	}
	if len(cfg.AuthInfos) == 0 {
		return "", fmt.Errorf("the portal's kubeconfig has no user to impersonate %s with", id.User)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = id.User
		ai.ImpersonateGroups = append([]string(nil), id.Groups...)
		ai.ImpersonateUID = ""
		ai.ImpersonateUserExtra = nil
	}
	if err := m.root.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(m.o.StateDir, dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, os.Chmod(path, 0o600)
}

// actingAs is the operation's context, carrying who it acts for; with Options.Impersonate an
// operation for nobody is refused before it starts.
func (m *Manager) actingAs(ctx context.Context, o RunOptions) (context.Context, error) {
	if m.o.Impersonate && o.Identity.User == "" {
		return nil, ErrNoIdentity
	}
	return withIdentity(ctx, o.Identity), nil
}
