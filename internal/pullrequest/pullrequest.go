package pullrequest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// RollLabel is the label that consents to worker rolls.
const RollLabel = "allow-worker-roll"

// Client calls GitHub's REST API for one repository ("owner/name").
type Client struct {
	// API is the API's base URL (GITHUB_API_URL; https://api.github.com).
	API, Token, Repo string
	// Bot is the login the check comments as (DefaultBot when empty): only its comments are edited.
	Bot  string
	HTTP *http.Client
}

// DefaultBot is the login of the workflow's GITHUB_TOKEN.
const DefaultBot = "github-actions[bot]"

var nextLink = regexp.MustCompile(`<([^>]+)>;\s*rel="next"`)

// get reads every page of a list into out (a pointer to a slice), following Link rel="next".
func get[T any](ctx context.Context, c *Client, path string, out *[]T) error {
	url := c.API + "/repos/" + c.Repo + path
	for url != "" {
		var page []T
		h, err := c.do(ctx, http.MethodGet, url, nil, &page)
		if err != nil {
			return err
		}
		*out = append(*out, page...)
		url = ""
		if m := nextLink.FindStringSubmatch(h.Get("Link")); m != nil {
			url = m[1]
		}
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, url string, body, out any) (http.Header, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(b[:min(len(b), 300)])))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, url, err)
		}
	}
	return resp.Header, nil
}

type user struct {
	Login string `json:"login"`
}

// Trigger is the event that started the run consent is read for.
type Trigger struct {
	// Labeled is true when the run was started by adding RollLabel, by Sender.
	Labeled bool
	Sender  string
}

// Consent is the roll consent of pull request pr at its head commit head, for cmd/policy
// -allow-roll: "all" when someone other than the author who may write to the repository gave it
// for that commit, else "", with why not. Consent is tied to the commit it was given for, by what
// GitHub itself records: an approving review of head with a line that is RollLabel alone, or
// RollLabel added in the event that started this run (a run for the head the label was added to;
// a push starts a run of its own, which cancels it). A label left from an earlier commit, by a run
// cancelled before it could remove it, counts for nothing.
func Consent(ctx context.Context, c *Client, pr int, author, head string, tr Trigger) (allow, why string, err error) {
	var reviews []struct {
		User     user   `json:"user"`
		State    string `json:"state"`
		CommitID string `json:"commit_id"`
		Body     string `json:"body"`
	}
	if err := get(ctx, c, fmt.Sprintf("/pulls/%d/reviews", pr), &reviews); err != nil {
		return "", "", err
	}
	for _, r := range slices.Backward(reviews) {
		if r.State != "APPROVED" || r.CommitID != head || !namesLabel(r.Body) || strings.EqualFold(r.User.Login, author) {
			continue
		}
		ok, err := mayWrite(ctx, c, r.User.Login)
		if err != nil {
			return "", "", err
		}
		if ok {
			return "all", fmt.Sprintf("%s in %s's approving review of %s", RollLabel, r.User.Login, head), nil
		}
	}
	if !tr.Labeled {
		return "", "no approving review of " + head + " with a line " + RollLabel + ", and this run was not started by adding " + RollLabel +
			" (a label counts in the run its adding starts, for the commit it was added to)", nil
	}
	var labels []struct {
		Name string `json:"name"`
	}
	if err := get(ctx, c, fmt.Sprintf("/issues/%d/labels", pr), &labels); err != nil {
		return "", "", err
	}
	if !slices.ContainsFunc(labels, func(l struct {
		Name string `json:"name"`
	}) bool {
		return l.Name == RollLabel
	}) {
		return "", RollLabel + " was removed since", nil
	}
	if strings.EqualFold(tr.Sender, author) {
		return "", RollLabel + " was added by the pull request's author (" + author + "): a maintainer must add it", nil
	}
	ok, err := mayWrite(ctx, c, tr.Sender)
	switch {
	case err != nil:
		return "", "", err
	case !ok:
		return "", fmt.Sprintf("%s was added by %s, who may not write to %s", RollLabel, tr.Sender, c.Repo), nil
	}
	return "all", RollLabel + " added by " + tr.Sender + " to " + head, nil
}

// namesLabel says whether a review's text has a line that is RollLabel alone (not "no
// allow-worker-roll").
func namesLabel(body string) bool {
	for _, line := range strings.Split(body, "\n") {
		if strings.TrimSpace(line) == RollLabel {
			return true
		}
	}
	return false
}

// mayWrite says whether login may write to the repository.
func mayWrite(ctx context.Context, c *Client, login string) (bool, error) {
	var perm struct {
		Permission string `json:"permission"`
	}
	if _, err := c.do(ctx, http.MethodGet, fmt.Sprintf("%s/repos/%s/collaborators/%s/permission", c.API, c.Repo, login), nil, &perm); err != nil {
		return false, err
	}
	return slices.Contains([]string{"admin", "maintain", "write"}, perm.Permission), nil
}

// Unlabel removes RollLabel from pull request pr (absent is fine): the workflow does it on every
// push, so a consent given to one commit does not carry over to the next.
func Unlabel(ctx context.Context, c *Client, pr int) error {
	_, err := c.do(ctx, http.MethodDelete, fmt.Sprintf("%s/repos/%s/issues/%d/labels/%s", c.API, c.Repo, pr, RollLabel), nil, nil)
	if err != nil && strings.Contains(err.Error(), "404 Not Found") {
		return nil
	}
	return err
}

// Marker is the first line of a stack's comment, by which its next run finds it.
func Marker(stack string) string { return "<!-- minimax-m3 preview: " + stack + " -->" }

// Comment posts body as pull request pr's comment for stack: it edits that stack's earlier comment
// (the last one starting with Marker(stack)), never another stack's or anyone else's text.
func Comment(ctx context.Context, c *Client, pr int, stack, body string) error {
	var comments []struct {
		ID   int64  `json:"id"`
		Body string `json:"body"`
		User user   `json:"user"`
	}
	if err := get(ctx, c, fmt.Sprintf("/issues/%d/comments", pr), &comments); err != nil {
		return err
	}
	bot := c.Bot
	if bot == "" {
		bot = DefaultBot
	}
	text := map[string]string{"body": Marker(stack) + "\n" + body}
	for i := len(comments) - 1; i >= 0; i-- {
		if strings.HasPrefix(comments[i].Body, Marker(stack)+"\n") && comments[i].User.Login == bot {
			_, err := c.do(ctx, http.MethodPatch, fmt.Sprintf("%s/repos/%s/issues/comments/%d", c.API, c.Repo, comments[i].ID), text, nil)
			return err
		}
	}
	_, err := c.do(ctx, http.MethodPost, fmt.Sprintf("%s/repos/%s/issues/%d/comments", c.API, c.Repo, pr), text, nil)
	return err
}

// Section is one titled part of a comment, shown folded.
type Section struct{ Title, Text string }

// Body is a comment: its title, and each section's text in a code block whose fence is longer than
// any run of backticks in the text, so no text can close it and write the comment's own lines.
func Body(title string, sections []Section) string {
	var b strings.Builder
	b.WriteString("### " + title + "\n")
	for _, s := range sections {
		fence := strings.Repeat("`", max(3, longestRun(s.Text, '`')+1))
		fmt.Fprintf(&b, "<details><summary>%s</summary>\n\n%s\n%s\n%s\n</details>\n", s.Title, fence, strings.TrimRight(s.Text, "\n"), fence)
	}
	return b.String()
}

func longestRun(s string, r rune) int {
	longest, n := 0, 0
	for _, c := range s {
		if c == r {
			n++
			longest = max(longest, n)
		} else {
			n = 0
		}
	}
	return longest
}

// TokenKey is the stack config key of the Hugging Face token; KubeconfigKey the stack's own
// kubeconfig.
const (
	TokenKey      = "minimax-m3:hfToken"
	KubeconfigKey = "minimax-m3:kubeconfig"
)

// StackFileHoldsNoToken refuses a stack file that sets TokenKey or KubeconfigKey in any YAML form
// (quoted, flow, anchored), or imports an ESC environment: a PR-checked stack keeps its token in an existing Secret, and its
// preview reaches the cluster with the workflow's read-only identity, never one the branch brings.
func StackFileHoldsNoToken(b []byte) error {
	var f struct {
		Config      map[string]any `yaml:"config"`
		Environment any            `yaml:"environment"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("the stack file: %w", err)
	}
	if f.Environment != nil {
		return errors.New("the stack file imports an ESC environment: a PR-checked stack's config is all in its file, where this check reads it (an environment could bring a token or a kubeconfig)")
	}
	if _, ok := f.Config[TokenKey]; ok {
		return fmt.Errorf("the stack file sets %s: a PR-checked stack keeps its token in an existing Secret (huggingFace.existingSecret true, no %s)", TokenKey, TokenKey)
	}
	if _, ok := f.Config[KubeconfigKey]; ok {
		return fmt.Errorf("the stack file sets %s: a PR-checked stack's preview reaches the cluster with the workflow's read-only identity (the KUBECONFIG_PREVIEW secret), never a kubeconfig of the branch's", KubeconfigKey)
	}
	return nil
}
