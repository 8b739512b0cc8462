package unit

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// The PR workflow's checks and preview jobs, run here step by step as GitHub's runner runs them:
// each `run:` script by bash with the environment the runner would give it (the workflow's, the
// job's and the step's env, what earlier steps wrote to $GITHUB_ENV and $GITHUB_OUTPUT, and the
// OIDC request variables in every step of a job allowed id-token: write), expressions substituted
// (every secret a sentinel value), and the actions played: checkout copies a branch in, the AWS
// login writes its keys to $GITHUB_ENV as the real action does, the others do nothing that matters
// here. The branch is hostile: every target of its Makefile, its tools/ scripts and its program
// (started by a fake `pulumi preview`) look for the sentinels in their environment and in every
// file under the runner's directories. What is simulated: GitHub's runner and its actions (no
// network, no GitHub here); what runs for real: the workflow's own scripts, by bash.
func TestTheWorkflowsStepsRunLocallyAndTheBranchFindsNoSecret(t *testing.T) {
	wf := readWorkflow(t)
	found := runWorkflowJobs(t, wf, "checks", "preview")
	want := []string{
		"Preview (the only step running the branch's code; its diff is commented and its steps are checked): env ACTIONS_ID_TOKEN_REQUEST_TOKEN",
		"Preview (the only step running the branch's code; its diff is commented and its steps are checked): env AWS_ACCESS_KEY_ID",
		"Preview (the only step running the branch's code; its diff is commented and its steps are checked): env AWS_SECRET_ACCESS_KEY",
		"Preview (the only step running the branch's code; its diff is commented and its steps are checked): env AWS_SESSION_TOKEN",
		"Preview (the only step running the branch's code; its diff is commented and its steps are checked): env PULUMI_ACCESS_TOKEN",
		"Preview (the only step running the branch's code; its diff is commented and its steps are checked): env PULUMI_BACKEND_URL",
		"Preview (the only step running the branch's code; its diff is commented and its steps are checked): env PULUMI_CONFIG_PASSPHRASE",
		"Preview (the only step running the branch's code; its diff is commented and its steps are checked): file preview-kubeconfig",
	}
	assert.Equal(t, want, found, "the branch's code finds the preview's credentials in the preview's step and nowhere else")

	// The runner finds a leak where there is one: a secret in the checks job's env reaches its
	// `make unit`; a script of the branch run in the preview job, before the preview, may ask
	// for the OIDC token (as tools/version.sh did there once).
	leaky := readWorkflow(t)
	checks := leaky.Jobs["checks"]
	checks.Env["PULUMI_CONFIG_PASSPHRASE"] = "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
	leaky.Jobs["checks"] = checks
	preview := leaky.Jobs["preview"]
	for i, s := range preview.Steps {
		if s.ID == "pulumi" {
			preview.Steps[i].Run = "echo \"version=$(bash tools/version.sh pulumi)\" >> \"$GITHUB_OUTPUT\"\n"
		}
	}
	found = runWorkflowJobs(t, leaky, "checks", "preview")
	assert.Contains(t, found, "Config and mocked-engine tests: env PULUMI_CONFIG_PASSPHRASE")
	assert.Contains(t, found, "The Pulumi CLI version `make toolchain` builds (tools/pulumi/go.mod): env ACTIONS_ID_TOKEN_REQUEST_TOKEN")
}

type wfStep struct {
	Name string            `yaml:"name"`
	ID   string            `yaml:"id"`
	If   string            `yaml:"if"`
	Uses string            `yaml:"uses"`
	Run  string            `yaml:"run"`
	Env  map[string]string `yaml:"env"`
	With map[string]string `yaml:"with"`
}

type wfJob struct {
	If          string            `yaml:"if"`
	Env         map[string]string `yaml:"env"`
	Permissions map[string]string `yaml:"permissions"`
	Steps       []wfStep          `yaml:"steps"`
}

type workflow struct {
	Env         map[string]string `yaml:"env"`
	Permissions map[string]string `yaml:"permissions"`
	Jobs        map[string]wfJob  `yaml:"jobs"`
}

func readWorkflow(t *testing.T) workflow { return readWorkflowFile(t, "preview.yml") }

func readWorkflowFile(t *testing.T, file string) workflow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", ".github", "workflows", file))
	require.NoError(t, err)
	var wf workflow
	require.NoError(t, yaml.Unmarshal(b, &wf))
	for name, j := range wf.Jobs {
		if j.Env == nil {
			j.Env = map[string]string{}
		}
		wf.Jobs[name] = j
	}
	return wf
}

// sentinel marks every secret's value, so that finding it anywhere is finding the secret.
const sentinel = "SENTINEL-"

// The hostile branch: each of these runs its spy, which reports, with the step's name, every
// environment variable and every file under the runner's root holding a sentinel.
const spyScript = `#!/usr/bin/env bash
report() { printf '%s: %s\n' "$SPY_STEP" "$1" >> "$SPY_LOG"; }
while IFS='=' read -r k v; do
  case "$v" in *SENTINEL-*) report "env $k" ;; esac
done < <(env)
grep -rl --exclude-dir=spy SENTINEL- "$SPY_ROOT" 2> /dev/null | while read -r f; do report "file $(basename "$f")"; done
exit 0
`

// runWorkflowJobs runs jobs in order on one runner root and returns what the branch's spies
// found, sorted and without repeats.
func runWorkflowJobs(t *testing.T, wf workflow, jobs ...string) []string {
	t.Helper()
	return runJobs(t, wf, runOptions{}, jobs...).found
}

// runOptions are what a run plays beyond the defaults.
type runOptions struct {
	// drift: the live state differs from the program's, so a preview that expects no changes fails.
	drift bool
	// mayFail: a failing step ends the run (runResult.failed) instead of failing the test.
	mayFail bool
	// staleHead: main has moved on since the commit the run checks out (a re-run of an old run).
	staleHead bool
	// refused: the policies refuse the preview `cmd/policy -up` checks, so nothing is applied.
	refused bool
}

// runResult is what a run did: the spies' findings, the pulumi commands run (one line each, its
// arguments), and the step that failed (mayFail).
type runResult struct {
	found, pulumi []string
	failed        string
}

func runJobs(t *testing.T, wf workflow, o runOptions, jobs ...string) runResult {
	t.Helper()
	root := t.TempDir()
	spyDir := filepath.Join(root, "spy")
	bin := filepath.Join(spyDir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	spyLog := filepath.Join(spyDir, "found")
	spy := filepath.Join(spyDir, "spy.sh")
	writeExec(t, spy, spyScript)
	// The branch: a Makefile whose targets, and tools/ scripts the workflow runs, are the spy.
	branch := filepath.Join(spyDir, "branch")
	require.NoError(t, os.MkdirAll(filepath.Join(branch, "tools", "pulumi"), 0o755))
	writeExec(t, filepath.Join(branch, "Makefile"), "unit policy render:\n\t@"+spy+"\n")
	writeExec(t, filepath.Join(branch, "tools", "version.sh"), "#!/usr/bin/env bash\n"+spy+"\necho v3.276.0\n")
	writeExec(t, filepath.Join(branch, "tools", "pulumi", "go.mod"), "module x\n\nrequire github.com/pulumi/pulumi/pkg/v3 v3.276.0\n")
	writeExec(t, filepath.Join(branch, "go.mod"), "module minimax-m3\n")
	// The runner's tools: pulumi runs the branch's program (the spy) for a preview; kubectl answers
	// as a cluster whose preview identity may read, not read Secrets, not write.
	pulumiArgs := filepath.Join(spyDir, "pulumi-args")
	drift := ""
	if o.drift {
		drift = "if [[ \" $* \" == *' --expect-no-changes '* ]]; then echo 'error: no changes were expected but changes were proposed'; exit 255; fi\n"
	}
	writeExec(t, filepath.Join(bin, "pulumi"), "#!/usr/bin/env bash\n"+spy+"\nprintf '%s\\n' \"$*\" >> "+pulumiArgs+
		"\nif [ -d \"$RUNNER_TEMP/out\" ]; then echo '{}' > \"$RUNNER_TEMP/out/events.json\"; fi\n"+drift+"echo 'no changes'\n")
	// go runs main's own tools (`go run ./cmd/policy -up`): played, it records what it is asked and,
	// refused, fails as the tool does on a violation.
	refuse := ""
	if o.refused {
		refuse = "echo 'stack agg: 1 violations'; exit 1\n"
	}
	writeExec(t, filepath.Join(bin, "go"), "#!/usr/bin/env bash\n"+spy+"\nprintf 'go %s\\n' \"$*\" >> "+pulumiArgs+"\n"+refuse+"echo 'no violations'\n")
	// gh answers the API's question of main's head: the run's commit, or a newer one.
	head := "\"$GITHUB_SHA\""
	if o.staleHead {
		head = strings.Repeat("f", 40)
	}
	writeExec(t, filepath.Join(bin, "gh"), "#!/usr/bin/env bash\ncase \"$*\" in *git/ref/heads/main*) echo "+head+" ;; esac\n")
	writeExec(t, filepath.Join(bin, "kubectl"), "#!/usr/bin/env bash\ncase \"$*\" in *'auth can-i'*) echo no ;; *'create configmap'*) exit 1 ;; esac\nexit 0\n")

	temp := filepath.Join(root, "_temp")
	home := filepath.Join(root, "home")
	ws := filepath.Join(root, "work", "minimax-m3", "minimax-m3")
	for _, d := range []string{temp, home, ws} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	ctx := map[string]string{
		"github.workspace":                 ws,
		"runner.temp":                      temp,
		"matrix.stack":                     "agg",
		"github.repository":                "platform/minimax-m3",
		"github.event.pull_request.number": "7",
		"github.event.pull_request.head.repo.full_name": "platform/minimax-m3",
		"vars.DYNAMO_RECIPE_COMMIT":                     strings.Repeat("ab", 20),
		"vars.PREVIEW_NAMESPACE":                        "team-a",
		"vars.PREVIEW_ROLE_ARN":                         "arn:aws:iam::123456789012:role/preview",
		"vars.DEPLOY_ROLE_ARN":                          "arn:aws:iam::123456789012:role/deploy",
		"vars.DRIFT_ROLE_ARN":                           "arn:aws:iam::123456789012:role/drift",
		"vars.IMAGE_REGISTRIES":                         "mirror.example.com/nvidia",
		"vars.AWS_REGION":                               "eu-west-1",
		"vars.PULUMI_ORGANIZATION":                      "platform",
		"vars.PULUMI_TEAM":                              "minimax-m3-preview",
	}
	var failed string
jobs:
	for _, name := range jobs {
		job, ok := wf.Jobs[name]
		require.True(t, ok, "job %s", name)
		outputs := map[string]string{}
		env := map[string]string{}
		perms := job.Permissions
		if perms == nil {
			perms = wf.Permissions
		}
		for _, s := range job.Steps {
			stepName := s.Name
			if stepName == "" {
				stepName = s.Uses
			}
			if s.If != "" && !evalIf(t, s.If, ctx) {
				continue
			}
			expand := func(v string) string { return expandExpr(t, v, ctx, outputs) }
			if s.Uses != "" {
				cmd := playAction(t, s, expand, branch, ws, env)
				if cmd == "" {
					continue
				}
				// The action runs the CLI: played as a script of the step, with its env, and the
				// backend the action logs in to as the CLI's.
				s.Run = cmd
				if u := s.With["cloud-url"]; u != "" {
					s.Env = maps.Clone(s.Env)
					if s.Env == nil {
						s.Env = map[string]string{}
					}
					s.Env["PULUMI_BACKEND_URL"] = u
				}
			}
			stepEnv := map[string]string{
				"PATH": bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME": home,
				"RUNNER_TEMP": temp, "GITHUB_WORKSPACE": ws, "GITHUB_REPOSITORY": ctx["github.repository"], "GITHUB_SHA": strings.Repeat("c", 40),
				"SPY_LOG": spyLog, "SPY_ROOT": root, "SPY_STEP": stepName,
			}
			if perms["id-token"] == "write" {
				// GitHub gives every step of such a job the means to ask for an OIDC token.
				stepEnv["ACTIONS_ID_TOKEN_REQUEST_URL"] = "https://token.actions.example/"
				stepEnv["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] = sentinel + "OIDC"
			}
			for _, layer := range []map[string]string{wf.Env, job.Env, env, s.Env} {
				for k, v := range layer {
					stepEnv[k] = expand(v)
				}
			}
			files := map[string]string{}
			for _, f := range []string{"GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"} {
				files[f] = filepath.Join(temp, "_runner_file_commands", f)
				require.NoError(t, os.MkdirAll(filepath.Dir(files[f]), 0o755))
				require.NoError(t, os.WriteFile(files[f], nil, 0o644))
				stepEnv[f] = files[f]
			}
			script := filepath.Join(temp, "step.sh")
			require.NoError(t, os.WriteFile(script, []byte(expand(s.Run)), 0o755))
			cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", script)
			cmd.Dir = ws
			for k, v := range stepEnv {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			out, err := cmd.CombinedOutput()
			if err != nil && o.mayFail {
				failed = stepName
				break jobs
			}
			require.NoError(t, err, "job %s, step %q:\n%s", name, stepName, out)
			for k, v := range readKeyValues(t, files["GITHUB_ENV"]) {
				env[k] = v
			}
			for k, v := range readKeyValues(t, files["GITHUB_OUTPUT"]) {
				outputs[s.ID+"."+k] = v
			}
		}
	}
	res := runResult{failed: failed, found: readLines(t, spyLog), pulumi: readLines(t, pulumiArgs)}
	sort.Strings(res.found)
	return res
}

// readLines reads a file's lines, without repeats (none: no file).
func readLines(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// playAction does what an action does that matters here. For pulumi/actions with a command, it
// returns the CLI command line the action runs (its inputs as the CLI's flags), for the caller to
// run as the step's script.
func playAction(t *testing.T, s wfStep, expand func(string) string, branch, ws string, env map[string]string) string {
	t.Helper()
	switch name, _, _ := strings.Cut(s.Uses, "@"); name {
	case "actions/checkout":
		dst := ws
		if p := s.With["path"]; p != "" {
			dst = filepath.Join(ws, expand(p))
			require.NoError(t, os.MkdirAll(filepath.Join(dst, expand(s.With["sparse-checkout"])), 0o755))
			return ""
		}
		out, err := exec.Command("cp", "-r", branch+"/.", dst).CombinedOutput()
		require.NoError(t, err, string(out))
	case "aws-actions/configure-aws-credentials":
		// The real action exports the role's session to every later step of the job.
		for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
			env[k] = sentinel + k
		}
		env["AWS_REGION"] = expand(s.With["aws-region"])
	case "pulumi/auth-actions":
		// The real action exchanges the job's OIDC token for a Pulumi Cloud access token of the
		// team the environment names, and exports it to every later step of the job.
		for _, v := range s.With {
			expand(v)
		}
		env["PULUMI_ACCESS_TOKEN"] = sentinel + "PULUMI_ACCESS_TOKEN"
	case "pulumi/actions":
		for _, v := range s.With {
			expand(v)
		}
		if s.With["command"] == "" {
			return "" // installs the CLI only
		}
		args := []string{s.With["command"], "--stack", s.With["stack-name"], "--non-interactive"}
		for input, flag := range map[string]string{"refresh": "--refresh", "expect-no-changes": "--expect-no-changes", "diff": "--diff"} {
			if s.With[input] == "true" {
				args = append(args, flag)
			}
		}
		for input, flag := range map[string]string{"color": "--color", "policyPacks": "--policy-pack"} {
			if v := s.With[input]; v != "" {
				args = append(args, flag, v)
			}
		}
		return "pulumi " + strings.Join(args, " ")
	case "actions/setup-go", "actions/upload-artifact", "actions/download-artifact":
		for _, v := range s.With {
			expand(v)
		}
	default:
		t.Fatalf("step %q uses %s, which this runner does not play: say what it does here", s.Name, s.Uses)
	}
	return ""
}

var exprPattern = regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`)

// expandExpr substitutes the expressions the workflow uses; any other fails the test, so that a
// new one is played on purpose.
func expandExpr(t *testing.T, v string, ctx, outputs map[string]string) string {
	t.Helper()
	return exprPattern.ReplaceAllStringFunc(v, func(m string) string {
		e := exprPattern.FindStringSubmatch(m)[1]
		switch {
		case strings.HasPrefix(e, "secrets."):
			return sentinel + strings.TrimPrefix(e, "secrets.")
		case e == "github.token":
			return sentinel + "GITHUB_TOKEN"
		case strings.HasPrefix(e, "steps."):
			id, rest, _ := strings.Cut(strings.TrimPrefix(e, "steps."), ".outputs.")
			return outputs[id+"."+rest]
		}
		if val, ok := ctx[e]; ok {
			return val
		}
		t.Fatalf("expression %q: not played here", e)
		return ""
	})
}

// evalIf decides the step conditions the workflow uses.
func evalIf(t *testing.T, cond string, ctx map[string]string) bool {
	t.Helper()
	if cond == "always()" {
		return true
	}
	if v, ok := strings.CutSuffix(cond, " != ''"); ok {
		val, known := ctx[v]
		if !known {
			t.Fatalf("condition %q: %s not played here", cond, v)
		}
		return val != ""
	}
	t.Fatalf("condition %q: not played here", cond)
	return false
}

// readKeyValues reads a $GITHUB_ENV or $GITHUB_OUTPUT file (key=value lines).
func readKeyValues(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = v
		} else if strings.TrimSpace(l) != "" {
			t.Fatalf("%s: %q is not key=value (multi-line values are not played here)", filepath.Base(file), l)
		}
	}
	return out
}

func writeExec(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o755), fmt.Sprint(path))
}

// The drift check and the deploy on merge, run here as the PR workflow is: their scripts by bash,
// pulumi/actions' command played as the action runs the CLI (its inputs as the CLI's flags), the
// CLI a fake that records what it is asked and, with drift, finds the live state changed. What the
// play leaves out: the action is a Node process that logs in to cloud-url (played as the CLI's
// PULUMI_BACKEND_URL) and passes its own runner tokens on to the CLI; the job-level `if`s are
// read, not evaluated.
func TestTheDriftCheckAndTheDeployRunLocally(t *testing.T) {
	drift := readWorkflowFile(t, "drift.yml")
	res := runJobs(t, drift, runOptions{mayFail: true}, "drift")
	assert.Empty(t, res.failed, "no drift: the run passes")
	require.Len(t, res.pulumi, 1)
	assert.Equal(t, "preview --stack agg --non-interactive --diff --expect-no-changes --refresh --color never", sortedFlags(res.pulumi[0]))
	res = runJobs(t, drift, runOptions{drift: true, mayFail: true}, "drift")
	assert.Equal(t, "Preview against the live state, expecting no changes", res.failed, "drift fails the run")

	deploy := readWorkflowFile(t, "deploy.yml")
	res = runJobs(t, deploy, runOptions{}, "deploy")
	assert.Equal(t, []string{"go run ./cmd/policy -stack agg -up -allow-roll all -image-registries mirror.example.com/nvidia"}, res.pulumi,
		"the update is main's own: a preview, every policy on it (the site's registries), and exactly its plan applied")
	update := "Preview, check every policy on that preview, and apply exactly its plan"
	assert.Equal(t, []string{
		update + ": env ACTIONS_ID_TOKEN_REQUEST_TOKEN",
		update + ": env AWS_ACCESS_KEY_ID",
		update + ": env AWS_SECRET_ACCESS_KEY",
		update + ": env AWS_SESSION_TOKEN",
		update + ": env PULUMI_ACCESS_TOKEN",
		update + ": env PULUMI_BACKEND_URL",
		update + ": env PULUMI_CONFIG_PASSPHRASE",
		update + ": file deploy-kubeconfig",
	}, res.found, "main's program gets the credentials of the update, in the update's step")
	res = runJobs(t, deploy, runOptions{refused: true, mayFail: true}, "deploy")
	assert.Equal(t, update, res.failed, "a refusal of the policies fails the run")

	// A re-run of an old deploy, after main moved on, stops before the update: it would roll the
	// newer changes back.
	res = runJobs(t, deploy, runOptions{staleHead: true, mayFail: true}, "deploy")
	assert.Equal(t, "The commit is main's head (a re-run of an older deploy would roll newer changes back)", res.failed)
	assert.Empty(t, res.pulumi)

	// What makes them safe to run unattended: main only, one at a time, none cancelled halfway,
	// the update behind an approved environment.
	var raw struct {
		On          map[string]any `yaml:"on"`
		Concurrency struct {
			Group            string `yaml:"group"`
			CancelInProgress bool   `yaml:"cancel-in-progress"`
		} `yaml:"concurrency"`
		Jobs map[string]struct {
			If          string `yaml:"if"`
			Environment string `yaml:"environment"`
			Strategy    struct {
				MaxParallel int `yaml:"max-parallel"`
			} `yaml:"strategy"`
		} `yaml:"jobs"`
	}
	for file, check := range map[string]func(){
		"drift.yml": func() {
			assert.Contains(t, raw.On, "schedule")
			assert.Equal(t, "github.ref == 'refs/heads/main'", raw.Jobs["drift"].If)
			assert.Equal(t, "drift", raw.Jobs["drift"].Environment)
		},
		"deploy.yml": func() {
			assert.Equal(t, map[string]any{"branches": []any{"main"}}, map[string]any{"branches": raw.On["push"].(map[string]any)["branches"]})
			assert.Equal(t, "github.ref == 'refs/heads/main'", raw.Jobs["deploy"].If, "a manual run from another branch deploys nothing")
			assert.Equal(t, "production", raw.Jobs["deploy"].Environment)
			assert.Equal(t, 1, raw.Jobs["deploy"].Strategy.MaxParallel, "one stack at a time")
		},
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", ".github", "workflows", file))
		require.NoError(t, err)
		raw.On, raw.Jobs = nil, nil
		require.NoError(t, yaml.Unmarshal(b, &raw))
		assert.False(t, raw.Concurrency.CancelInProgress, "%s: a running update or check is never cancelled", file)
		check()
	}
}

// sortedFlags puts a command line's boolean flags in order (the play ranges over a map).
func sortedFlags(line string) string {
	f := strings.Fields(line)
	var head, bools, valued []string
	for i := 0; i < len(f); i++ {
		switch {
		case i < 4:
			head = append(head, f[i])
		case i+1 < len(f) && !strings.HasPrefix(f[i+1], "--"):
			valued = append(valued, f[i]+" "+f[i+1])
			i++
		default:
			bools = append(bools, f[i])
		}
	}
	sort.Strings(bools)
	sort.Strings(valued)
	return strings.Join(append(append(head, bools...), valued...), " ")
}
