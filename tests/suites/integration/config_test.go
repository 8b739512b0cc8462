package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"minimax-m3/automation"
	"minimax-m3/config"
)

// leafSettings lists every typed field of a profile's config that holds a value, as the path and
// value a user would give `pulumi config set --path`: the recipe's defaults, so that setting all of
// them changes nothing.
func leafSettings(profile config.Profile, skip ...string) []string {
	c := config.Defaults(profile)
	var unused []string
	if profile == config.Aggregated {
		unused = []string{"prefillWorker", "decodeWorker"}
	} else {
		unused = []string{"worker"}
	}
	var out []string
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(path, v.Elem())
			}
		case reflect.Struct:
			t := v.Type()
			for i := range t.NumField() {
				name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
				if name == "" || name == "-" {
					continue
				}
				walk(pathJoin(path, name), v.Field(i))
			}
		case reflect.Map:
			keys := make([]string, 0, v.Len())
			for _, k := range v.MapKeys() {
				keys = append(keys, k.String())
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(pathJoin(path, k), v.MapIndex(reflect.ValueOf(k)))
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(fmt.Sprintf("%s[%d]", path, i), v.Index(i))
			}
		case reflect.String:
			if v.String() != "" {
				out = append(out, path+"="+v.String())
			}
		case reflect.Int, reflect.Int64:
			out = append(out, path+"="+strconv.FormatInt(v.Int(), 10))
		case reflect.Float64:
			out = append(out, path+"="+strconv.FormatFloat(v.Float(), 'f', -1, 64))
		case reflect.Bool:
			out = append(out, path+"="+strconv.FormatBool(v.Bool()))
		}
	}
	walk("", reflect.ValueOf(c))
	var kept []string
	for _, s := range out {
		key, _, _ := strings.Cut(s, "=")
		top := regexp.MustCompile(`^[a-zA-Z]+`).FindString(key)
		if slices.Contains(unused, top) || slices.ContainsFunc(skip, func(p string) bool { return strings.HasPrefix(key, p) }) {
			continue
		}
		kept = append(kept, "minimax-m3:"+s)
	}
	return kept // in walk order: list items by index
}

var plainSegment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// pathJoin appends a property to a Pulumi config path, quoting keys such as
// nvidia.com/vllm-distributed-executor-backend.
func pathJoin(path, key string) string {
	if !plainSegment.MatchString(key) {
		return path + `["` + key + `"]`
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// Every typed field, set through the real CLI with `pulumi config set-all --path` (which stores
// digit-only values as numbers, true/false as booleans and the rest, decimals included, as
// strings), then rewritten by hand with every value a string, then a few with `--type`: each time
// the program reads back exactly the recipe's values, so a preview shows no change.
//
// The live objects are the API server's, through the real CRD schemas: the stack does not wait
// for the graph (readiness.waitForReady off), so no operator is needed or played; the test plays
// the Job controller (the download completes) and the garbage collector (a replaced Job's
// foreground deletion).
func TestEveryTypedFieldSetThroughTheCLIReadsBackTheSame(t *testing.T) {
	parallel(t)
	for _, stack := range []string{"agg", "disagg"} {
		t.Run(stack, func(t *testing.T) {
			ctx := context.Background()
			ns := "cli-config-" + stack
			s := newStack(t, stack, ns, auto.ConfigMap{"minimax-m3:readiness.waitForReady": {Value: "false"}})
			upWithJobs(t, s)

			// Keys the test stack sets to its own values stay as they are.
			settings := leafSettings(config.Profile(stack), "namespace.name", "modelDownload.timeout", "readiness.timeout", "smokeTest.enabled",
				"readiness.waitForReady", "imageRegistries")
			require.Greater(t, len(settings), 100)
			args := []string{"config", "set-all", "--path"}
			for _, kv := range settings {
				args = append(args, "--plaintext", kv)
			}
			out, err := s.cli(args...)
			require.NoError(t, err, out)
			stackFile := filepath.Join(s.dir, "Pulumi."+stack+".yaml")
			b, err := os.ReadFile(stackFile)
			require.NoError(t, err)
			assert.Contains(t, string(b), "gpuMemoryUtilization: \"0.", "a decimal is stored as a string")
			assert.Regexp(t, `maxNumSeqs: \d+\n`, string(b), "a whole number is stored as a number")
			_, err = s.preview(ctx, optpreview.ExpectNoChanges())
			require.NoError(t, err, "every field set by path reads back as the recipe's value\n%s", s.log.String())

			// A hand-edited stack file with every value a string.
			var file yaml.Node
			require.NoError(t, yaml.Unmarshal(b, &file))
			stringify(&file)
			edited, err := yaml.Marshal(&file)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(stackFile, edited, 0o644))
			_, err = s.preview(ctx, optpreview.ExpectNoChanges())
			require.NoError(t, err, "every field written as a string reads back the same\n%s", s.log.String())

			// `--type` as the user picks it.
			role := "worker"
			if stack == "disagg" {
				role = "decodeWorker"
			}
			for _, typed := range [][]string{
				{"float", "minimax-m3:" + role + ".vllm.gpuMemoryUtilization", "0.9"},
				{"int", "minimax-m3:" + role + ".vllm.maxNumSeqs", "256"},
				{"bool", "minimax-m3:" + role + ".vllm.enablePrefixCaching", "true"},
				{"string", "minimax-m3:" + role + ".replicas", "3"},
				{"float", "minimax-m3:speculativeDecoding.numSpeculativeTokens", "3"},
				{"int", "minimax-m3:gpusPerNode", "4"},
			} {
				out, err := s.cli("config", "set", "--path", "--type", typed[0], typed[1], typed[2])
				require.NoError(t, err, out)
			}
			_, err = s.preview(ctx, optpreview.ExpectNoChanges())
			require.NoError(t, err, "typed values read back the same\n%s", s.log.String())

			// The examples of docs/configuration.md land where they say.
			for _, kv := range [][]string{
				{"minimax-m3:" + role + ".vllm.gpuMemoryUtilization", "0.85"},
				{"minimax-m3:" + role + ".network.rdmaResource", "rdma.example.com/device"},
				{"minimax-m3:" + role + ".network.rdmaCount", "4"},
			} {
				out, err := s.cli("config", "set", "--path", kv[0], kv[1])
				require.NoError(t, err, out)
			}
			_, ops, err := s.up(ctx)
			require.NoError(t, err, s.log.String())
			assert.Equal(t, map[string]string{"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph": "update"}, opsOf(ops))
			spec := liveGraphSpec(t, ns, "minimax-m3-"+stack+"-gb200-agentic")
			w := spec.Components[len(spec.Components)-1] // the role set above is the last one
			assert.Contains(t, w.PodTemplate.Spec.Containers[0].Args, "0.85")
			rdma := w.PodTemplate.Spec.Containers[0].Resources.Limits["rdma.example.com/device"]
			assert.Equal(t, "4", rdma.String())

			// The field types the recipe's defaults leave empty: lists of strings and of objects, maps
			// of lists, optional objects and the free-form pod-template patch.
			args = []string{"config", "set-all", "--path"}
			for _, kv := range []string{
				"imagePullSecrets[0]=ngc-pull",
				role + ".extraArgs[0]=--enable-log-requests",
				role + ".scheduling.requiredNodeLabels.pool[0]=gb200",
				role + ".scheduling.tolerations[0].key=nvidia.com/gpu",
				role + ".scheduling.tolerations[0].operator=Exists",
				role + ".scheduling.tolerations[0].effect=NoSchedule",
				role + ".probes.startup.failureThreshold=1560",
				role + ".podTemplatePatch.spec.enableServiceLinks=false",
				"modelDownload.scheduling.nodeSelector.pool=cpu",
			} {
				args = append(args, "--plaintext", "minimax-m3:"+kv)
			}
			out, err = s.cli(args...)
			require.NoError(t, err, out)
			upWithJobs(t, s)
			spec = liveGraphSpec(t, ns, "minimax-m3-"+stack+"-gb200-agentic")
			pod := spec.Components[len(spec.Components)-1].PodTemplate.Spec
			assert.Equal(t, "ngc-pull", pod.ImagePullSecrets[0].Name)
			assert.Equal(t, "--enable-log-requests", pod.Containers[0].Args[len(pod.Containers[0].Args)-1])
			assert.Equal(t, []string{"gb200"}, pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values)
			assert.Equal(t, "nvidia.com/gpu", pod.Tolerations[0].Key)
			assert.EqualValues(t, 1560, pod.Containers[0].StartupProbe.FailureThreshold)
			require.NotNil(t, pod.EnableServiceLinks)
			assert.False(t, *pod.EnableServiceLinks)
			job := mustGet(t, jobGVK, ns, "minimax-m3-model-download")
			selector, _, _ := unstructured.NestedStringMap(job.Object, "spec", "template", "spec", "nodeSelector")
			assert.Equal(t, map[string]string{"pool": "cpu"}, selector)
		})
	}
}

// stringify turns every scalar under the stack file's config into a quoted string.
func stringify(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float" || n.Tag == "!!bool") {
		n.Tag = "!!str"
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		stringify(c)
	}
}

// A key the program does not know, or a value of the wrong type, fails preview naming that key,
// before anything reaches the cluster.
func TestUnknownKeysAndBadValuesFailPreviewAtTheirOwnKey(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	ns := "unknown-keys"
	s := newStack(t, "agg", ns, nil)

	// `pulumi config set` without --path: a key with a dot in it, which the program does not know.
	require.NoError(t, s.stack.SetConfig(ctx, "minimax-m3:workers.replicas", auto.ConfigValue{Value: "2"}))
	_, err := s.preview(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error()+s.log.String(), "minimax-m3:workers.replicas: unknown key")
	require.NoError(t, s.stack.RemoveConfig(ctx, "minimax-m3:workers.replicas"))

	s.set(ctx, "minimax-m3:worker.vllm.gpuMemoryUtilization", "most")
	s.set(ctx, "minimax-m3:worker.vllm.maxNumSeq", "12")
	_, err = s.preview(ctx)
	require.Error(t, err)
	msg := err.Error() + s.log.String()
	assert.Contains(t, msg, `minimax-m3:worker.vllm.gpuMemoryUtilization: must be a number, got "most"`)
	assert.Contains(t, msg, "minimax-m3:worker.vllm.maxNumSeq: unknown field")
	assert.NotContains(t, msg, "cannot read", "no error on the top-level key")
	_, exists := get(t, namespaceGVK, "", ns)
	assert.False(t, exists, "nothing reached the API server")
}

// A kubeconfig held as the stack's secret (from ESC or another stack's output) is what the
// provider and the program's own reads use: with KUBECONFIG naming no file and the cluster's reads
// required, the preview reaches the API server through it alone.
func TestAKubeconfigFromConfigIsTheStacksWayToTheCluster(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	ns := "kubeconfig-from-config"
	s := makeStack(t, filepath.Join(t.TempDir(), "no-such-kubeconfig"), "agg", ns, auto.ConfigMap{
		"minimax-m3:kubernetes.requireRead": {Value: "true", Secret: false},
	}, nil)
	_, err := s.preview(ctx)
	require.Error(t, err, "without a way to the cluster, a required read refuses")
	assert.Contains(t, err.Error()+s.log.String(), "minimax-m3:kubernetes.requireRead: the cluster cannot be read")

	kubeconfig, err := os.ReadFile(cluster.kubeconfig)
	require.NoError(t, err)
	require.NoError(t, automation.SetSecret(ctx, s.stack.Stack, "minimax-m3:kubeconfig", string(kubeconfig), false))
	ops, err := s.preview(ctx)
	require.NoError(t, err, s.log.String())
	assert.Equal(t, "create", opsOf(ops)["kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph"], "%v", opsOf(ops))
	stored, err := os.ReadFile(filepath.Join(s.dir, "Pulumi.agg.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(kubeconfig), "server:")
	assert.NotContains(t, string(stored), "server:", "the stack file holds the kubeconfig encrypted")
}
