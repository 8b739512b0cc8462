package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/policy"
)

// Commits of the project's history the PR check is tested with.
const (
	// The last commit before the day-two work: labels, stable names, recipe-ordered worker args.
	beforeDayTwo = "7e84239"
	// A README change, and the program refactor after it that must change nothing live.
	readmeOnly  = "7856888"
	afterDayTwo = "95ec2ce"
)

// prCheck runs `make pr-check`'s command on the suite's API server, its stacks in namespaces of
// the prefix (with no prefix: as `make pr-check` runs it, on an API server of its own), and returns
// its output and exit code.
func prCheck(t *testing.T, prefix string, args ...string) (string, int) {
	t.Helper()
	if prefix != "" {
		args = append([]string{"-kubeconfig", cluster.kubeconfig, "-namespace-prefix", prefix}, args...)
	}
	cmd := exec.Command(command(t, "./tests/cmd/prcheck", "prcheck"), args...)
	cmd.Dir = filepath.Join(cluster.root, "tests")
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("pr-check %s (exit %d):\n%s", strings.Join(args, " "), code, out)
	return string(out), code
}

func summary(t *testing.T, out, stack string) string {
	t.Helper()
	_, after, ok := strings.Cut(out, "== "+stack+": summary\n")
	require.True(t, ok, "no summary for %s", stack)
	before, _, _ := strings.Cut(after, "\n== ")
	return before
}

// A refactor of the program (and a README change) does nothing to either live stack.
func TestPRCheckRefactorChangesNothing(t *testing.T) {
	parallel(t)
	out, code := prCheck(t, "prc-refactor-", "-base", readmeOnly, "-head", afterDayTwo)
	assert.Equal(t, 0, code)
	for _, stack := range []string{"agg", "disagg"} {
		s := summary(t, out, stack)
		assert.Contains(t, s, "no resource changes")
		assert.Contains(t, s, fmt.Sprintf("policies: %d rules, no violations", len(policy.Rules)))
	}
	assert.Contains(t, summary(t, out, "agg"), "workers roll: Frontend=no Worker=no")
	assert.Contains(t, summary(t, out, "disagg"), "workers roll: DecodeWorker=no Frontend=no PrefillWorker=no")
	assert.Contains(t, out, "== pr-check passed")
}

// The day-two upgrade reorders the workers' arguments into the recipe's order: the workers roll.
// The check fails unless the author says the roll is meant.
func TestPRCheckCatchesAWorkerRoll(t *testing.T) {
	parallel(t)
	out, code := prCheck(t, "prc-roll-", "-base", beforeDayTwo, "-head", afterDayTwo, "-stacks", "agg")
	assert.Equal(t, 1, code)
	s := summary(t, out, "agg")
	assert.Contains(t, s, "workers roll: Frontend=no Worker=yes")
	assert.Contains(t, s, "FAIL: Worker rolls (podTemplate.spec.containers[0].args[27 items]), and -roll does not name it")
	// Labels are added everywhere; nothing is replaced, so no policy fails.
	assert.Contains(t, s, `update   kubernetes:core/v1:PersistentVolumeClaim model-cache: metadata.labels["app.kubernetes.io/instance"]`)
	assert.Contains(t, s, fmt.Sprintf("policies: %d rules, no violations", len(policy.Rules)))
	assert.NotContains(t, s, "replace")

	out, code = prCheck(t, "prc-roll-consent-", "-base", beforeDayTwo, "-head", afterDayTwo, "-stacks", "agg", "-roll", "Worker")
	assert.Equal(t, 0, code)
	assert.Contains(t, summary(t, out, "agg"), "workers roll: Frontend=no Worker=yes")
}

// A stack-file change that would replace the model cache claim fails the check. (A new storage
// class would not: the program ignores changes to the claim's immutable fields.)
func TestPRCheckRefusesToReplaceTheCache(t *testing.T) {
	parallel(t)
	head := t.TempDir()
	archive := exec.Command("sh", "-c", "git archive "+afterDayTwo+" | tar -x -C "+head)
	archive.Dir = cluster.root
	b, err := archive.CombinedOutput()
	require.NoError(t, err, string(b))
	stackFile := filepath.Join(head, "Pulumi.agg.yaml")
	f, err := os.ReadFile(stackFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(stackFile, append(f, "  minimax-m3:modelCache:\n    claimName: model-cache-v2\n"...), 0o644))

	// As `make pr-check` runs it: an API server of its own, the stacks in local-<stack>.
	out, code := prCheck(t, "", "-base", afterDayTwo, "-head", head, "-stacks", "agg")
	assert.Equal(t, 1, code)
	s := summary(t, out, "agg")
	assert.Contains(t, s, "replace  kubernetes:core/v1:PersistentVolumeClaim model-cache: metadata.name")
	assert.Contains(t, s, "FAIL: [keep-model-cache] PersistentVolumeClaim local-agg/model-cache-v2: this change would replace it (metadata.name)")
	assert.Contains(t, out, "== pr-check FAILED")
}

// On a cluster of -kubeconfig, the check deploys only into namespaces it creates: one that exists
// is refused before anything is deployed, and an empty prefix is refused at its flag.
func TestPRCheckOnAClusterTouchesOnlyWhatItCreates(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	taken := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prc-taken-agg", Labels: map[string]string{"team": "someone-else"}}}
	require.NoError(t, cluster.client.Create(ctx, taken))
	out, code := prCheck(t, "prc-taken-", "-base", afterDayTwo, "-stacks", "agg")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "-namespace-prefix: namespace prc-taken-agg exists in that cluster")
	assert.NotContains(t, out, "== agg: up from the base program")
	var secrets corev1.SecretList
	require.NoError(t, cluster.client.List(ctx, &secrets, client.InNamespace(taken.Name)))
	assert.Empty(t, secrets.Items, "nothing deployed into the namespace")

	cmd := exec.Command(command(t, "./tests/cmd/prcheck", "prcheck"), "-base", afterDayTwo, "-kubeconfig", cluster.kubeconfig, "-namespace-prefix", "", "-stacks", "agg")
	cmd.Dir = filepath.Join(cluster.root, "tests")
	b, _ := cmd.CombinedOutput()
	assert.Equal(t, 2, cmd.ProcessState.ExitCode())
	assert.Contains(t, string(b), `-namespace-prefix "": must start a namespace name`)
}
