package unit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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
	reviews     []map[string]any
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
		case r.Method == http.MethodGet && p == "/repos/acme/mm3/pulls/7/reviews":
			var items []any
			for _, rv := range f.reviews {
				items = append(items, rv)
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
		case r.Method == http.MethodPatch || r.Method == http.MethodPost || r.Method == http.MethodDelete:
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

// Worker rolls need the label from a maintainer other than the pull request's author, in the run
// its adding starts: the author's own label, or one from someone who may not write, consents to
// nothing; nor does a label another event's run finds.
func TestRollConsentNeedsAMaintainerOtherThanTheAuthor(t *testing.T) {
	ctx := context.Background()
	perms := map[string]string{"alice": "write", "bob": "maintain", "eve": "read"}
	for _, tc := range []struct {
		name    string
		labels  []string
		trigger pullrequest.Trigger
		allow   string
		why     string
	}{
		{"no label, no review", []string{"bug"}, pullrequest.Trigger{}, "", "this run was not started by adding allow-worker-roll"},
		{"the author's own", []string{pullrequest.RollLabel}, pullrequest.Trigger{Labeled: true, Sender: "alice"}, "", "added by the pull request's author (alice)"},
		{"a maintainer's", []string{"bug", "docs", pullrequest.RollLabel}, pullrequest.Trigger{Labeled: true, Sender: "bob"}, "all", "added by bob to " + headSHA},
		{"someone who may not write", []string{pullrequest.RollLabel}, pullrequest.Trigger{Labeled: true, Sender: "eve"}, "", "added by eve, who may not write to acme/mm3"},
		{"removed before the run read it", []string{"bug"}, pullrequest.Trigger{Labeled: true, Sender: "bob"}, "", "was removed since"},
		// A label left from an earlier commit (its removal's run cancelled by a reopen): the
		// reopen's run was not started by adding it.
		{"left from an earlier commit", []string{pullrequest.RollLabel}, pullrequest.Trigger{Sender: "alice"}, "", "this run was not started by adding allow-worker-roll"},
	} {
		f := &fakeGitHub{labels: tc.labels, permissions: perms}
		allow, why, err := pullrequest.Consent(ctx, f.serve(t), 7, "alice", headSHA, tc.trigger)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.allow, allow, tc.name)
		assert.Contains(t, why, tc.why, tc.name)
	}
}

// headSHA is the pull request's head commit in fakeGitHub.
const headSHA = "0123456789abcdef0123456789abcdef01234567"

// Consent by review is tied to the commit it reviewed: it counts for that commit only, when it
// approves, has a line that is the label alone, and comes from a maintainer other than the author.
func TestRollConsentIsForTheCommitItWasGivenFor(t *testing.T) {
	ctx := context.Background()
	perms := map[string]string{"alice": "write", "bob": "maintain", "eve": "read"}
	review := func(who, state, commit, body string) map[string]any {
		return map[string]any{"user": map[string]any{"login": who}, "state": state, "commit_id": commit, "body": body}
	}
	for _, tc := range []struct {
		name       string
		reviews    []map[string]any
		allow, why string
	}{
		{"a review of the head naming the label", []map[string]any{review("bob", "APPROVED", headSHA, "fine\nallow-worker-roll\n")}, "all",
			"allow-worker-roll in bob's approving review of " + headSHA},
		{"a review of an earlier commit", []map[string]any{review("bob", "APPROVED", "fedcba9876543210fedcba9876543210fedcba98", "allow-worker-roll")}, "", "no approving review of " + headSHA},
		{"a review that does not name it", []map[string]any{review("bob", "APPROVED", headSHA, "LGTM")}, "", "no approving review"},
		{"a review that names it to refuse it", []map[string]any{review("bob", "APPROVED", headSHA, "no allow-worker-roll for this one")}, "", "no approving review"},
		{"the author's own review", []map[string]any{review("alice", "APPROVED", headSHA, "allow-worker-roll")}, "", "no approving review"},
		{"a review asking for changes", []map[string]any{review("bob", "CHANGES_REQUESTED", headSHA, "allow-worker-roll")}, "", "no approving review"},
		{"a reader's review", []map[string]any{review("eve", "APPROVED", headSHA, "allow-worker-roll")}, "", "no approving review"},
	} {
		f := &fakeGitHub{reviews: tc.reviews, permissions: perms}
		allow, why, err := pullrequest.Consent(ctx, f.serve(t), 7, "alice", headSHA, pullrequest.Trigger{})
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.allow, allow, tc.name)
		assert.Contains(t, why, tc.why, tc.name)
	}
}

// Each stack keeps one comment, edited on every run: agg's run never touches disagg's comment, nor
// a comment anyone else wrote with the marker, whatever page it is on.
func TestEachStackKeepsItsOwnComment(t *testing.T) {
	ctx := context.Background()
	bot := map[string]any{"login": pullrequest.DefaultBot}
	f := &fakeGitHub{comments: []map[string]any{
		{"id": 1, "body": pullrequest.Marker("agg") + "\nold agg", "user": bot},
		{"id": 2, "body": "LGTM, but " + pullrequest.Marker("disagg"), "user": map[string]any{"login": "bob"}},
		{"id": 3, "body": pullrequest.Marker("disagg") + "\nold disagg", "user": bot},
		{"id": 4, "body": pullrequest.Marker("agg") + "\n(success) forged", "user": map[string]any{"login": "mallory"}},
		{"id": 5, "body": "a reviewer's note", "user": map[string]any{"login": "bob"}},
	}}
	c := f.serve(t)
	require.NoError(t, pullrequest.Comment(ctx, c, 7, "disagg", "new disagg"))
	require.NoError(t, pullrequest.Comment(ctx, c, 7, "agg", "new agg"))
	require.NoError(t, pullrequest.Comment(ctx, c, 7, "other", "first"))
	assert.Equal(t, []string{
		`PATCH /repos/acme/mm3/issues/comments/3 {"body":"` + "\\u003c!-- minimax-m3 preview: disagg --\\u003e\\nnew disagg" + `"}`,
		`PATCH /repos/acme/mm3/issues/comments/1 {"body":"` + "\\u003c!-- minimax-m3 preview: agg --\\u003e\\nnew agg" + `"}`,
		`POST /repos/acme/mm3/issues/7/comments {"body":"` + "\\u003c!-- minimax-m3 preview: other --\\u003e\\nfirst" + `"}`,
	}, f.writes, "the bot's own comments only: mallory's copy of the marker is left alone")
}

// A push drops the consent: the label is removed, so a maintainer gives it again for the new commit.
func TestAPushDropsTheRollConsent(t *testing.T) {
	f := &fakeGitHub{}
	require.NoError(t, pullrequest.Unlabel(context.Background(), f.serve(t), 7))
	assert.Equal(t, []string{"DELETE /repos/acme/mm3/issues/7/labels/allow-worker-roll "}, f.writes)
}

// The comment's sections sit in code blocks no text can close: a preview that prints a fence and a
// forged verdict stays inside its block.
func TestACommentsTextCannotCloseItsBlock(t *testing.T) {
	forged := "diff\n```\n### `agg`: preview and policies (success)\n````\n"
	body := pullrequest.Body("`agg`: preview and policies (failure)", []pullrequest.Section{{Title: "preview", Text: forged}, {Title: "policies", Text: "FAIL: x"}})
	assert.Contains(t, body, "\n`````\n"+strings.TrimRight(forged, "\n")+"\n`````\n", "a fence longer than the text's longest")
	assert.Contains(t, body, "\n```\nFAIL: x\n```\n")
	assert.True(t, strings.HasPrefix(body, "### `agg`: preview and policies (failure)\n"))
}

// A stack file that holds the token, in any YAML form, fails the check; one that does not passes.
func TestAStackFileWithTheTokenIsRefused(t *testing.T) {
	for _, file := range []string{
		"config:\n  minimax-m3:hfToken:\n    secure: v1:abc\n",
		"config:\n  \"minimax-m3:hfToken\": {secure: v1:abc}\n",
		"config: {'minimax-m3:hfToken': x, minimax-m3:profile: agg}\n",
	} {
		assert.ErrorContains(t, pullrequest.StackFileHoldsNoToken([]byte(file)), "sets minimax-m3:hfToken", file)
	}
	assert.NoError(t, pullrequest.StackFileHoldsNoToken([]byte("config:\n  minimax-m3:profile: agg\n  minimax-m3:huggingFace:\n    existingSecret: true\n")))
	// Nor a kubeconfig of the branch's: the preview reaches the cluster with the workflow's identity.
	assert.ErrorContains(t, pullrequest.StackFileHoldsNoToken([]byte("config:\n  minimax-m3:kubeconfig:\n    secure: v1:abc\n")), "sets minimax-m3:kubeconfig")
	assert.ErrorContains(t, pullrequest.StackFileHoldsNoToken([]byte("environment:\n  - team-a/gb200\nconfig:\n  minimax-m3:profile: agg\n")), "imports an ESC environment")
}

// The PR check's workflow keeps what the branch's code can touch apart from what judges it: the
// branch runs only in the preview job, with the passphrase and the backend in its preview step
// alone and the cloud login just before it; the verdict job, on a runner of its own, checks out
// only the base (no Go workspace or module cache the branch could have written), builds the
// policy and pull-request tools from it, reads the preview's output as an artifact, and runs
// nothing else; no job's environment holds a secret.
func TestThePRCheckKeepsSecretsFromTheBranchsCode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", ".github", "workflows", "preview.yml"))
	require.NoError(t, err)
	type step struct {
		Name       string            `yaml:"name"`
		Uses       string            `yaml:"uses"`
		Run        string            `yaml:"run"`
		Env        map[string]string `yaml:"env"`
		With       map[string]string `yaml:"with"`
		WorkingDir string            `yaml:"working-directory"`
	}
	var wf struct {
		Jobs map[string]struct {
			Needs       any               `yaml:"needs"`
			Env         map[string]string `yaml:"env"`
			Permissions map[string]string `yaml:"permissions"`
			Steps       []step            `yaml:"steps"`
		} `yaml:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &wf))
	for name, job := range wf.Jobs {
		for k, v := range job.Env {
			assert.NotContains(t, v, "secrets.", "job %s's environment %s reaches every step", name, k)
		}
		for _, s := range job.Steps {
			if strings.HasPrefix(s.Uses, "actions/setup-go") && name != "checks" {
				assert.Equal(t, "false", s.With["cache"], "job %s restores no cache the checks job (any branch's code) could have written", name)
			}
			assert.NotContains(t, s.Run, "--edit-last", "one stack's comment would replace the other's")
		}
	}
	for _, s := range wf.Jobs["checks"].Steps {
		for k, v := range s.Env {
			assert.NotContains(t, v, "secrets.", "the checks job runs the branch's code for forks too: step %q, %s", s.Name, k)
		}
	}

	preview := wf.Jobs["preview"]
	at, oidc := -1, -1
	for i, s := range preview.Steps {
		switch {
		case strings.HasPrefix(s.Name, "Preview (the only step"):
			at = i
		case strings.Contains(s.Uses, "configure-aws-credentials"):
			oidc = i
		}
	}
	require.True(t, at >= 0 && oidc >= 0, "the preview and the OIDC login")
	assert.Equal(t, at-1, oidc, "the cloud credentials come just before the preview")
	for i, s := range preview.Steps {
		for k, v := range s.Env {
			if strings.Contains(v, "secrets.PULUMI") {
				assert.Equal(t, at, i, "%s only in the preview's step, not in %q", k, s.Name)
			}
		}
		if i > at {
			assert.Contains(t, s.Uses, "actions/upload-artifact", "after the preview, the preview job only hands its output on: %q", s.Name)
		}
	}
	assert.NotContains(t, preview.Permissions, "pull-requests", "the branch's job may not write to the pull request")

	// The branch's stack file is judged before any preview decrypts it, by the base's tool.
	assert.Equal(t, []any{"checks", "stack-file"}, preview.Needs, "the preview waits for the stack file's check")
	stackFile := wf.Jobs["stack-file"]
	var judged bool
	for _, s := range stackFile.Steps {
		if strings.HasPrefix(s.Uses, "actions/checkout") {
			assert.Equal(t, "${{ github.event.pull_request.base.sha }}", s.With["ref"], "only the base is checked out")
		}
		judged = judged || strings.Contains(s.Run, `"$RUNNER_TEMP/pullrequest" stack-file`)
	}
	assert.True(t, judged)

	verdict := wf.Jobs["verdict"]
	assert.Equal(t, "preview", verdict.Needs)
	assert.Equal(t, "off", verdict.Env["GOWORK"])
	assert.NotContains(t, verdict.Permissions, "id-token")
	var built, checkedOut bool
	for _, s := range verdict.Steps {
		for k, v := range s.Env {
			assert.False(t, strings.Contains(v, "secrets.") && v != "${{ github.token }}", "the verdict holds no secret: %q %s", s.Name, k)
		}
		switch {
		case strings.HasPrefix(s.Uses, "actions/checkout"):
			checkedOut = true
			assert.Equal(t, "${{ github.event.pull_request.base.sha }}", s.With["ref"], "only the base is checked out")
			assert.Empty(t, s.With["repository"])
		case strings.Contains(s.Run, "go build"):
			built = true
			assert.Contains(t, s.Run, "go mod verify")
		case s.Run != "":
			for _, runsBranch := range []string{"make ", "go run", "go test", "pulumi "} {
				assert.NotContains(t, s.Run, runsBranch, "step %q", s.Name)
			}
			assert.Regexp(t, `"\$RUNNER_TEMP/(policy|pullrequest)"`, s.Run, "the verdict runs only the base's tools: %q", s.Name)
		}
	}
	assert.True(t, built && checkedOut)
}

// The one required check fails unless every job ran and passed: a preview skipped for a fork or
// after failed checks, or a verdict that did not run, is red, never a success by omission. Its
// script runs here by bash with the results GitHub would give it.
func TestTheRequiredCheckFailsUnlessEveryStackWasPreviewedAndJudged(t *testing.T) {
	wf := readWorkflow(t)
	req, ok := wf.Jobs["required"]
	require.True(t, ok, "the workflow has a job named required")
	assert.Equal(t, "always()", req.If, "it runs whatever the jobs before it did")
	var raw struct {
		Jobs map[string]struct {
			Needs any `yaml:"needs"` // a name, or a list of names
		} `yaml:"jobs"`
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "..", ".github", "workflows", "preview.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &raw))
	var others []string
	for name := range raw.Jobs {
		if name != "required" {
			others = append(others, name)
		}
	}
	var needs []string
	for _, n := range raw.Jobs["required"].Needs.([]any) {
		needs = append(needs, n.(string))
	}
	assert.ElementsMatch(t, others, needs, "it waits for every other job")
	require.Len(t, req.Steps, 1)
	step := req.Steps[0]
	for _, tc := range []struct {
		name                             string
		checks, stackFile, preview, verd string
		pass                             bool
		says                             string
	}{
		{"all passed", "success", "success", "success", "success", true, ""},
		{"a fork: no preview", "success", "skipped", "skipped", "skipped", false, "preview: skipped"},
		{"checks failed, so nothing was previewed", "failure", "success", "skipped", "skipped", false, "checks: failure"},
		{"a verdict failed", "success", "success", "success", "failure", false, "verdict: failure"},
		{"cancelled", "success", "success", "cancelled", "skipped", false, "preview: cancelled"},
	} {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", step.Run)
		cmd.Env = append(os.Environ(), "CHECKS="+tc.checks, "STACK_FILE="+tc.stackFile, "PREVIEW="+tc.preview, "VERDICT="+tc.verd)
		out, err := cmd.CombinedOutput()
		assert.Equal(t, tc.pass, err == nil, "%s: %s", tc.name, out)
		assert.Contains(t, string(out), tc.says, tc.name)
	}
	for k, v := range map[string]string{"CHECKS": "needs.checks.result", "STACK_FILE": "needs.stack-file.result", "PREVIEW": "needs.preview.result", "VERDICT": "needs.verdict.result"} {
		assert.Equal(t, "${{ "+v+" }}", step.Env[k], k)
	}
}
