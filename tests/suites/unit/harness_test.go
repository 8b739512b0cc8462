package unit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"minimax-m3/components"
	"minimax-m3/config"
	"minimax-m3/manifest"
)

// testToken is the Hugging Face token the tests configure; it must never appear in plain text.
const testToken = "hf_unitTestTokenNeverPlain"

// siteConfig is what a platform engineer adds to a committed stack file before `pulumi up`. The
// smoke test (on by default) is off here so that the tests of the recipe's objects see only those;
// smoketest_test.go turns it back on (an empty override removes the key).
func siteConfig() map[string]string {
	return map[string]string{
		"minimax-m3:namespace":  `{"name":"inference"}`,
		"minimax-m3:hfToken":    testToken,
		"minimax-m3:modelCache": `{"storageClass":"rwx-fast"}`,
		"minimax-m3:smokeTest":  `{"enabled":false}`,
	}
}

type recorded struct {
	Type, Name string
	Inputs     resource.PropertyMap
	// RPC holds the resource options: parent, dependencies, retainOnDelete, timeouts, ...
	RPC *pulumirpc.RegisterResourceRequest
}

type mocks struct {
	mu        sync.Mutex
	resources []recorded
	// previous is the stack identity the stack's last update exported ("" for a new stack); the
	// program reads it through a reference to its own stack, which is not recorded (it is a read
	// of the stack's outputs, not an object).
	previous string
	// outputs are other outputs of the stack's last update (namespace, graphName).
	outputs map[string]string
}

func (m *mocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if args.TypeToken == "pulumi:pulumi:StackReference" {
		outputs := resource.PropertyMap{}
		if m.previous != "" {
			outputs[components.IdentityOutput] = resource.NewProperty(m.previous)
		}
		for k, v := range m.outputs {
			outputs[resource.PropertyKey(k)] = resource.NewProperty(v)
			var list []any
			if strings.HasPrefix(v, "[") && json.Unmarshal([]byte(v), &list) == nil {
				// A list output (JSON here), as the engine keeps it: numbers are float64.
				outputs[resource.PropertyKey(k)] = resource.NewPropertyValue(list)
			}
		}
		if n, ok := m.outputs[components.GraphReadyGenerationOutput]; ok {
			var f float64
			_, _ = fmt.Sscan(n, &f)
			outputs[components.GraphReadyGenerationOutput] = resource.NewProperty(f) // a number, as the engine keeps it
		}
		return args.ID, resource.PropertyMap{"name": resource.NewProperty(args.ID), "outputs": resource.NewProperty(outputs)}, nil
	}
	m.resources = append(m.resources, recorded{Type: args.TypeToken, Name: args.Name, Inputs: args.Inputs, RPC: args.RegisterRPC})
	if strings.HasSuffix(args.TypeToken, ":ComputeDomain") {
		// The API server gives the new object its UID.
		out := args.Inputs.Copy()
		if md := out["metadata"]; md.IsObject() {
			meta := md.ObjectValue().Copy()
			meta["uid"] = resource.NewProperty(computeDomainUID)
			out["metadata"] = resource.NewProperty(meta)
		}
		return args.Name + "-id", out, nil
	}
	if strings.HasSuffix(args.TypeToken, ":DynamoGraphDeployment") {
		// The API server's answer carries the object's generation: a new one's is 1.
		out := args.Inputs.Copy()
		if md := out["metadata"]; md.IsObject() {
			meta := md.ObjectValue().Copy()
			meta["generation"] = resource.NewProperty(1.0)
			out["metadata"] = resource.NewProperty(meta)
		}
		return args.Name + "-id", out, nil
	}
	return args.Name + "-id", args.Inputs, nil
}

func (m *mocks) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) { return args.Args, nil }

// computeDomainUID is the UID the mocked API server gives a new ComputeDomain.
const computeDomainUID = "5d0c8f0e-3d1a-4a57-9d2e-1b6f4c8a9e21"

// result is one mocked run of the program.
type result struct {
	resources []recorded
	outputs   map[string]any
}

// stackConfig reads a committed stack file as Pulumi hands it to the program (config.StackFileValues).
func stackConfig(t testing.TB, stack string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "Pulumi."+stack+".yaml"))
	require.NoError(t, err)
	out, secure, err := config.StackFileValues(b)
	require.NoError(t, err)
	require.Empty(t, secure, "a committed stack file holds no secret")
	return out
}

// fakeCluster answers the program's ownership check: objects by "resource/namespace/name", with
// their labels (and, under keys starting with "@", their annotations). An empty one is a cluster
// where none of the stack's objects exist yet.
type fakeCluster map[string]map[string]string

func (f fakeCluster) Read(_ context.Context, gvr schema.GroupVersionResource, namespace, name string) (components.LiveObject, bool, error) {
	labels, ok := f[gvr.Resource+"/"+namespace+"/"+name]
	o := components.LiveObject{Labels: map[string]string{}, Annotations: map[string]string{}}
	for k, v := range labels {
		if a, ok := strings.CutPrefix(k, "@"); ok {
			o.Annotations[a] = v
		} else {
			o.Labels[k] = v
		}
	}
	return o, ok, nil
}

// run runs the program on a committed stack file plus site config plus overrides (an empty
// override value removes the key).
func run(t testing.TB, stack string, overrides map[string]string) (*result, error) {
	return runOn(t, fakeCluster{}, stack, overrides)
}

// runOn runs the program against a cluster holding the given objects.
func runOn(t testing.TB, cluster fakeCluster, stack string, overrides map[string]string) (*result, error) {
	t.Helper()
	return runWith(t, components.Options{Cluster: cluster}, stack, overrides)
}

// runWith runs the program with the given options.
func runWith(t testing.TB, opts components.Options, stack string, overrides map[string]string) (*result, error) {
	t.Helper()
	return runAfter(t, "", opts, stack, overrides)
}

// runAfter runs the program on a stack whose last update exported the identity previous.
func runAfter(t testing.TB, previous string, opts components.Options, stack string, overrides map[string]string) (*result, error) {
	t.Helper()
	return runMocked(t, &mocks{previous: previous}, opts, stack, overrides)
}

// runPrevious runs the program on a stack whose last update exported these outputs.
func runPrevious(t testing.TB, outputs map[string]string, opts components.Options, stack string, overrides map[string]string) (*result, error) {
	t.Helper()
	return runMocked(t, &mocks{outputs: outputs}, opts, stack, overrides)
}

func runMocked(t testing.TB, m *mocks, opts components.Options, stack string, overrides map[string]string) (*result, error) {
	t.Helper()
	cfg := stackConfig(t, stack)
	for k, v := range siteConfig() {
		cfg[k] = v
	}
	for k, v := range overrides {
		if v == "" {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	res := &result{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		opts.ConfigKeys = keys
		outs, err := components.Deploy(ctx, opts)
		if err != nil {
			return err
		}
		outs.ToMapOutput().ApplyT(func(v map[string]any) error {
			res.outputs = v
			return nil
		})
		return nil
	}, pulumi.WithMocks("minimax-m3", stack, m), func(info *pulumi.RunInfo) {
		info.Config = cfg
		info.ConfigSecretKeys = []string{"minimax-m3:hfToken", "minimax-m3:kubeconfig"}
	})
	res.resources = m.resources
	return res, err
}

func mustRun(t *testing.T, stack string, overrides map[string]string) *result {
	t.Helper()
	r, err := run(t, stack, overrides)
	require.NoError(t, err)
	return r
}

// byType returns the resources of a type token.
func (r *result) byType(typ string) []recorded {
	var out []recorded
	for _, res := range r.resources {
		if res.Type == typ {
			out = append(out, res)
		}
	}
	return out
}

// one returns the only resource of a type token.
func (r *result) one(t *testing.T, typ string) recorded {
	t.Helper()
	rs := r.byType(typ)
	require.Len(t, rs, 1, "resources of type %s", typ)
	return rs[0]
}

// named returns the resource of a type token and name.
func (r *result) named(t *testing.T, typ, name string) recorded {
	t.Helper()
	for _, res := range r.resources {
		if res.Type == typ && res.Name == name {
			return res
		}
	}
	t.Fatalf("no %s %s", typ, name)
	return recorded{}
}

// customResource returns the custom resource of a kind.
func (r *result) customResource(t *testing.T, kind string) recorded {
	t.Helper()
	var found []recorded
	for _, res := range r.resources {
		if strings.HasPrefix(res.Type, "kubernetes:") && strings.HasSuffix(res.Type, ":"+kind) {
			found = append(found, res)
		}
	}
	require.Len(t, found, 1, "custom resources of kind %s", kind)
	return found[0]
}

// plain turns recorded inputs into JSON-shaped Go values (secrets unwrapped).
func plain(t *testing.T, pm resource.PropertyMap) map[string]any {
	t.Helper()
	b, err := json.Marshal(unwrap(resource.NewObjectProperty(pm)))
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

func unwrap(v resource.PropertyValue) any {
	switch {
	case v.IsSecret():
		return unwrap(v.SecretValue().Element)
	case v.IsObject():
		m := map[string]any{}
		for k, e := range v.ObjectValue() {
			m[string(k)] = unwrap(e)
		}
		return m
	case v.IsArray():
		var a []any
		for _, e := range v.ArrayValue() {
			a = append(a, unwrap(e))
		}
		return a
	case v.IsComputed(), v.IsOutput():
		return nil
	}
	return v.V
}

// decode reads a field path of recorded inputs into a typed value.
func decode[T any](t *testing.T, rec recorded, path ...string) T {
	t.Helper()
	var v any = plain(t, rec.Inputs)
	for _, p := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s: %v is not an object", strings.Join(path, "."), p)
		v = m[p]
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out T
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

func graphSpec(t *testing.T, r *result) manifest.DynamoGraphDeploymentSpec {
	return decode[manifest.DynamoGraphDeploymentSpec](t, r.customResource(t, "DynamoGraphDeployment"), "spec")
}

func envNames(env []corev1.EnvVar) []string {
	var out []string
	for _, e := range env {
		out = append(out, e.Name)
	}
	return out
}

func envValue(t *testing.T, env []corev1.EnvVar, name string) string {
	t.Helper()
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("no env %s in %v", name, envNames(env))
	return ""
}

// resourceList is a container's resources as text, the way the recipe writes them.
type resourceList struct {
	Claims           []string
	Requests, Limits map[string]string
}

func resourcesOf(c corev1.Container) resourceList {
	text := func(l corev1.ResourceList) map[string]string {
		if len(l) == 0 {
			return nil
		}
		out := map[string]string{}
		for k, q := range l {
			out[string(k)] = q.String()
		}
		return out
	}
	r := resourceList{Requests: text(c.Resources.Requests), Limits: text(c.Resources.Limits)}
	for _, cl := range c.Resources.Claims {
		r.Claims = append(r.Claims, cl.Name)
	}
	return r
}

func cacheVolume(claim string) corev1.Volume {
	return corev1.Volume{Name: "shared-model-cache", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func secretEnv(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func sortedTypes(r *result) []string {
	var out []string
	for _, res := range r.resources {
		out = append(out, fmt.Sprintf("%s %s", res.Type, res.Name))
	}
	sort.Strings(out)
	return out
}
