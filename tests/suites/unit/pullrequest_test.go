package unit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"minimax-m3/internal/pullrequest"
)

// fakeGitHub answers the REST calls of package pullrequest for one pull request (#7 of acme/mm3)
// from what the test sets, lists in pages of two (Link rel="next"), and records every write.
type fakeGitHub struct {
	mu          sync.Mutex
	labels      []string
	labelledBy  []string          // who added allow-worker-roll, in order
	permissions map[string]string // login: admin, maintain, write, read
	comments    []map[string]any
	writes      []string
}

func (f *fakeGitHub) serve(t *testing.T) *pullrequest.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer gh-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		page := func(items []any) {
			start := 0
			_, _ = fmt.Sscan(r.URL.Query().Get("page"), &start)
			end := min(start+2, len(items))
			if end < len(items) {
				w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?page=%d>; rel="next"`, r.Host, r.URL.Path, end))
			}
			_ = json.NewEncoder(w).Encode(items[min(start, len(items)):end])
		}
		switch p := r.URL.Path; {
		case r.Method == http.MethodGet && p == "/repos/acme/mm3/issues/7/labels":
			var items []any
			for _, l := range f.labels {
				items = append(items, map[string]any{"name": l})
			}
			page(items)
		case r.Method == http.MethodGet && p == "/repos/acme/mm3/issues/7/events":
			items := []any{map[string]any{"event": "labeled", "actor": map[string]any{"login": "bot"}, "label": map[string]any{"name": "needs-review"}},
				map[string]any{"event": "committed"}}
			for _, who := range f.labelledBy {
				items = append(items, map[string]any{"event": "labeled", "actor": map[string]any{"login": who}, "label": map[string]any{"name": pullrequest.RollLabel}})
			}
			page(items)
		case r.Method == http.MethodGet && strings.HasPrefix(p, "/repos/acme/mm3/collaborators/"):
			login := strings.TrimSuffix(strings.TrimPrefix(p, "/repos/acme/mm3/collaborators/"), "/permission")
			_ = json.NewEncoder(w).Encode(map[string]string{"permission": f.permissions[login]})
		case r.Method == http.MethodGet && p == "/repos/acme/mm3/issues/7/comments":
			var items []any
			for _, c := range f.comments {
				items = append(items, c)
			}
			page(items)
		case r.Method == http.MethodPatch || r.Method == http.MethodPost:
			b, _ := io.ReadAll(r.Body)
			f.writes = append(f.writes, r.Method+" "+p+" "+string(b))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("{}"))
		default:
			http.Error(w, "unexpected "+r.Method+" "+p, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return &pullrequest.Client{API: srv.URL, Token: "gh-token", Repo: "acme/mm3"}
}

// Worker rolls need the label from a maintainer other than the pull request's author: the author's
// own label, or one from someone who may not write, consents to nothing; the last one to add it
// counts, however many pages of events precede it.
func TestRollConsentNeedsAMaintainerOtherThanTheAuthor(t *testing.T) {
	ctx := context.Background()
	perms := map[string]string{"alice": "write", "bob": "maintain", "eve": "read"}
	for _, tc := range []struct {
		name       string
		labels     []string
		labelledBy []string
		allow      string
		why        string
	}{
		{"no label", []string{"bug"}, nil, "", "no allow-worker-roll label"},
		{"the author's own", []string{pullrequest.RollLabel}, []string{"alice"}, "", "added by the pull request's author (alice)"},
		{"a maintainer's", []string{"bug", "docs", pullrequest.RollLabel}, []string{"alice", "bob"}, "all", "added by bob"},
		{"the author's, after a maintainer's", []string{pullrequest.RollLabel}, []string{"bob", "alice"}, "", "added by the pull request's author"},
		{"someone who may not write", []string{pullrequest.RollLabel}, []string{"eve"}, "", "added by eve, who may not write to acme/mm3 (read)"},
	} {
		f := &fakeGitHub{labels: tc.labels, labelledBy: tc.labelledBy, permissions: perms}
		allow, why, err := pullrequest.Consent(ctx, f.serve(t), 7, "alice")
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.allow, allow, tc.name)
		assert.Contains(t, why, tc.why, tc.name)
	}
}

// Each stack keeps one comment, edited on every run: agg's run never touches disagg's comment or
// anyone else's, whatever page it is on.
func TestEachStackKeepsItsOwnComment(t *testing.T) {
	ctx := context.Background()
	f := &fakeGitHub{comments: []map[string]any{
		{"id": 1, "body": pullrequest.Marker("agg") + "\nold agg"},
		{"id": 2, "body": "LGTM, but " + pullrequest.Marker("disagg")},
		{"id": 3, "body": pullrequest.Marker("disagg") + "\nold disagg"},
		{"id": 4, "body": "a reviewer's note"},
	}}
	c := f.serve(t)
	require.NoError(t, pullrequest.Comment(ctx, c, 7, "disagg", "new disagg"))
	require.NoError(t, pullrequest.Comment(ctx, c, 7, "agg", "new agg"))
	require.NoError(t, pullrequest.Comment(ctx, c, 7, "other", "first"))
	assert.Equal(t, []string{
		`PATCH /repos/acme/mm3/issues/comments/3 {"body":"` + "\\u003c!-- minimax-m3 preview: disagg --\\u003e\\nnew disagg" + `"}`,
		`PATCH /repos/acme/mm3/issues/comments/1 {"body":"` + "\\u003c!-- minimax-m3 preview: agg --\\u003e\\nnew agg" + `"}`,
		`POST /repos/acme/mm3/issues/7/comments {"body":"` + "\\u003c!-- minimax-m3 preview: other --\\u003e\\nfirst" + `"}`,
	}, f.writes)
}

// The PR check's workflow gives the branch's code no secret but in the one step that needs it: the
// passphrase and the backend only in the preview's step, no secret in a job's environment, the
// cloud credentials just before the preview, no step of the preview job building or running the
// branch's code besides the preview, and the policies, the consent and the comment from tools
// built from the pull request's base.
func TestThePRCheckKeepsSecretsFromTheBranchsCode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", ".github", "workflows", "preview.yml"))
	require.NoError(t, err)
	var wf struct {
		Jobs map[string]struct {
			Env   map[string]string `yaml:"env"`
			Steps []struct {
				Name       string            `yaml:"name"`
				Uses       string            `yaml:"uses"`
				Run        string            `yaml:"run"`
				Env        map[string]string `yaml:"env"`
				With       map[string]string `yaml:"with"`
				WorkingDir string            `yaml:"working-directory"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &wf))
	for name, job := range wf.Jobs {
		for k, v := range job.Env {
			assert.NotContains(t, v, "secrets.", "job %s's environment %s reaches every step", name, k)
		}
	}
	checks := wf.Jobs["checks"]
	for _, s := range checks.Steps {
		for k, v := range s.Env {
			assert.NotContains(t, v, "secrets.", "the checks job runs the branch's code for forks too: step %q, %s", s.Name, k)
		}
	}
	job := wf.Jobs["preview"]
	preview, oidc, base := -1, -1, -1
	for i, s := range job.Steps {
		switch {
		case strings.HasPrefix(s.Name, "Preview (the only step"):
			preview = i
		case strings.Contains(s.Uses, "configure-aws-credentials"):
			oidc = i
		case strings.HasPrefix(s.Uses, "actions/checkout") && s.With["ref"] == "${{ github.event.pull_request.base.sha }}":
			base = i
		}
	}
	require.True(t, preview >= 0 && oidc >= 0 && base >= 0, "the preview, the OIDC login and the base's checkout")
	assert.Equal(t, preview-1, oidc, "the cloud credentials come just before the preview")
	for i, s := range job.Steps {
		for k, v := range s.Env {
			if strings.Contains(v, "secrets.PULUMI") {
				assert.Equal(t, preview, i, "%s only in the preview's step, not in %q", k, s.Name)
			}
		}
		if i == preview {
			continue
		}
		for _, runsBranch := range []string{"make ", "go run", "go test", "pulumi "} {
			assert.NotContains(t, s.Run, runsBranch, "step %q runs the branch's code", s.Name)
		}
		if strings.Contains(s.Run, "go build") {
			assert.Equal(t, "${{ env.BASE }}", s.WorkingDir, "step %q builds from the base", s.Name)
			assert.Less(t, i, preview)
		}
		if i > preview {
			assert.Regexp(t, `"\$RUNNER_TEMP/(policy|pullrequest)"`, s.Run, "after the preview only the base's tools run: %q", s.Name)
		}
		assert.NotContains(t, s.Run, "--edit-last", "one stack's comment would replace the other's")
	}
}
