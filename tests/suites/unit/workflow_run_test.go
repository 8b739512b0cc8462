package unit

import (
	"fmt"
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

func readWorkflow(t *testing.T) workflow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", ".github", "workflows", "preview.yml"))
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
	writeExec(t, filepath.Join(bin, "pulumi"), "#!/usr/bin/env bash\n"+spy+"\necho '{}' > \"$RUNNER_TEMP/out/events.json\"\necho 'no changes'\n")
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
		"vars.AWS_REGION":                               "eu-west-1",
	}
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
				playAction(t, s, expand, branch, ws, env)
				continue
			}
			stepEnv := map[string]string{
				"PATH": bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME": home,
				"RUNNER_TEMP": temp, "GITHUB_WORKSPACE": ws, "GITHUB_REPOSITORY": ctx["github.repository"],
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
			require.NoError(t, err, "job %s, step %q:\n%s", name, stepName, out)
			for k, v := range readKeyValues(t, files["GITHUB_ENV"]) {
				env[k] = v
			}
			for k, v := range readKeyValues(t, files["GITHUB_OUTPUT"]) {
				outputs[s.ID+"."+k] = v
			}
		}
	}
	b, err := os.ReadFile(spyLog)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var found []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !slices.Contains(found, l) {
			found = append(found, l)
		}
	}
	sort.Strings(found)
	return found
}

// playAction does what an action does that matters here.
func playAction(t *testing.T, s wfStep, expand func(string) string, branch, ws string, env map[string]string) {
	t.Helper()
	switch name, _, _ := strings.Cut(s.Uses, "@"); name {
	case "actions/checkout":
		dst := ws
		if p := s.With["path"]; p != "" {
			dst = filepath.Join(ws, expand(p))
			require.NoError(t, os.MkdirAll(filepath.Join(dst, expand(s.With["sparse-checkout"])), 0o755))
			return
		}
		out, err := exec.Command("cp", "-r", branch+"/.", dst).CombinedOutput()
		require.NoError(t, err, string(out))
	case "aws-actions/configure-aws-credentials":
		// The real action exports the role's session to every later step of the job.
		for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
			env[k] = sentinel + k
		}
		env["AWS_REGION"] = expand(s.With["aws-region"])
	case "actions/setup-go", "pulumi/actions", "actions/upload-artifact", "actions/download-artifact":
		for _, v := range s.With {
			expand(v)
		}
	default:
		t.Fatalf("step %q uses %s, which this runner does not play: say what it does here", s.Name, s.Uses)
	}
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
