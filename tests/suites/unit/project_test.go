package unit

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"minimax-m3/config"
)

// Pulumi.yaml declares every top-level key the program reads (the two secrets aside: a declared
// secret cannot have a default, so the CLI would require one), each with a description; a scalar
// with the type of its Go field, an object or a list without one (a stack may hold it as its JSON
// text, which the CLI refuses for a typed object). A declared default changes nothing: the
// program reads a stack holding only the defaults as the profile's own defaults, for each
// profile. The template's questions name keys the program knows, the token as a secret.
func TestThePulumiYamlDeclaresTheConfigKeys(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "Pulumi.yaml"))
	require.NoError(t, err)
	var project struct {
		Config map[string]struct {
			Type        string `yaml:"type"`
			Description string `yaml:"description"`
			Default     any    `yaml:"default"`
			Secret      bool   `yaml:"secret"`
		} `yaml:"config"`
		Template struct {
			Config map[string]struct {
				Description string `yaml:"description"`
				Secret      bool   `yaml:"secret"`
			} `yaml:"config"`
		} `yaml:"template"`
	}
	require.NoError(t, yaml.Unmarshal(b, &project))

	var want []string
	for _, k := range config.Keys() {
		if !config.IsSecretKey(k) {
			want = append(want, k)
		}
	}
	declared := slices.Sorted(maps.Keys(project.Config))
	assert.Equal(t, want, declared, "every top-level key is declared, the secrets aside")

	fields := map[string]reflect.StructField{}
	for f := range reflect.TypeFor[config.Config]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields[name] = f
	}
	for k, d := range project.Config {
		assert.NotEmpty(t, d.Description, k)
		assert.False(t, d.Secret, k)
		kind := fields[k].Type.Kind()
		switch kind {
		case reflect.String:
			assert.Equal(t, "string", d.Type, k)
		case reflect.Int:
			assert.Equal(t, "integer", d.Type, k)
		case reflect.Bool:
			assert.Equal(t, "boolean", d.Type, k)
		default:
			assert.Empty(t, d.Type, "%s (a %s) is declared without a type", k, kind)
		}
		if k == "profile" {
			assert.Nil(t, d.Default, "the profile is required, by the CLI as by the program")
		} else {
			assert.NotNil(t, d.Default, "%s has a default: a declared key without one is required", k)
		}
	}

	for _, profile := range []config.Profile{config.Aggregated, config.Disaggregated} {
		raw := config.Raw{Values: map[string]string{config.HFTokenKey: testToken}, Secrets: map[string]bool{config.HFTokenKey: true}}
		for k, d := range project.Config {
			if d.Default == nil {
				continue
			}
			if s, ok := d.Default.(string); ok {
				raw.Values[k] = s
				continue
			}
			v, err := json.Marshal(d.Default)
			require.NoError(t, err)
			raw.Values[k] = string(v)
		}
		raw.Values["profile"] = string(profile)
		raw.Values["namespace.name"] = "team-a" // required: no default
		got, err := config.Parse(raw)
		require.NoError(t, err, profile)
		want := config.Defaults(profile)
		want.Namespace.Name = "team-a"
		if len(got.ImagePullSecrets) == 0 {
			got.ImagePullSecrets = nil // [] and none are the same: no pull secret
		}
		if len(got.PriorityClasses) == 0 {
			got.PriorityClasses = nil // no priority class allowed either way
		}
		assert.Equal(t, want, got, "the declared defaults are %s's own", profile)
	}

	require.NotEmpty(t, project.Template.Config)
	for k, q := range project.Template.Config {
		assert.NotEmpty(t, q.Description, k)
		path, ok := strings.CutPrefix(k, config.Namespace+":")
		require.True(t, ok, k)
		top, _, _ := strings.Cut(path, ".")
		assert.Contains(t, config.Keys(), top, k)
		assert.Equal(t, config.IsSecretKey(path), q.Secret, "%s is asked for as a secret exactly when it is one", k)
	}
	assert.Contains(t, project.Template.Config, config.Key(config.HFTokenKey))
	assert.Contains(t, project.Template.Config, config.Key("namespace.name"))
	assert.Contains(t, project.Template.Config, config.Key("modelCache.storageClass"))
}

// A key set without --path names the path it spells (pulumi config set minimax-m3:worker.replicas
// 2, or `pulumi new`'s questions), merged into the object as --path would.
func TestAKeySetWithoutPathIsItsPath(t *testing.T) {
	raw := config.Raw{Values: map[string]string{
		config.HFTokenKey:         testToken,
		"profile":                 "agg",
		"namespace.name":          "team-a",
		"modelCache":              `{"size":"2Ti"}`,
		"modelCache.storageClass": "rwx",
		"worker.replicas":         "2",
		"worker.scheduling":       `{"nodeSelector":{"pool":"gb200"}}`,
		"placement.check":         "false",
	}, Secrets: map[string]bool{config.HFTokenKey: true}}
	c, err := config.Parse(raw)
	require.NoError(t, err)
	assert.Equal(t, "team-a", c.Namespace.Name)
	assert.Equal(t, "rwx", c.ModelCache.StorageClass)
	assert.Equal(t, "2Ti", c.ModelCache.Size, "the object and the path merge")
	assert.Equal(t, 2, c.Worker.Replicas)
	assert.Equal(t, map[string]string{"pool": "gb200"}, c.Worker.Scheduling.NodeSelector)
	assert.False(t, c.Placement.Check)

	// Set both ways, Pulumi keeps both keys and the program refuses to guess: after `pulumi new`
	// wrote namespace.name, `pulumi config set --path minimax-m3:namespace.name` writes the object.
	for name, values := range map[string]map[string]string{
		"the object":       {"namespace.name": "team-a", "namespace": `{"name":"team-b"}`},
		"the object above": {"worker.scheduling.nodeSelector": `{"a":"b"}`, "worker": `{"scheduling":{"nodeSelector":{"c":"d"}}}`},
		"a key above":      {"worker.scheduling": `{"schedulerName":"x"}`, "worker.scheduling.schedulerName": "y"},
	} {
		bad := config.Raw{Values: map[string]string{config.HFTokenKey: testToken, "profile": "agg", "namespace.name": "team-a"}, Secrets: raw.Secrets}
		maps.Copy(bad.Values, values)
		_, err := config.Parse(bad)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "sets the same value: keep one", name)
	}
	// A key above whose value leaves the path alone merges with it too.
	ok2 := config.Raw{Values: map[string]string{config.HFTokenKey: testToken, "profile": "agg", "namespace.name": "team-a",
		"worker.scheduling": `{"schedulerName":"x"}`, "worker.scheduling.nodeSelector.pool": "gb200"}, Secrets: raw.Secrets}
	c, err = config.Parse(ok2)
	require.NoError(t, err)
	assert.Equal(t, "x", c.Worker.Scheduling.SchedulerName)
	assert.Equal(t, map[string]string{"pool": "gb200"}, c.Worker.Scheduling.NodeSelector)

	// An object that leaves the path alone merges with it.
	ok := config.Raw{Values: map[string]string{config.HFTokenKey: testToken, "profile": "agg", "namespace.name": "team-a", "namespace": `{"create":false}`}, Secrets: raw.Secrets}
	c, err = config.Parse(ok)
	require.NoError(t, err)
	assert.Equal(t, "team-a", c.Namespace.Name)
	assert.False(t, c.Namespace.Create)

	for key, want := range map[string]string{
		"worker.replicass":           "worker.replicass",
		"namespace.name.first":       "namespace.name",
		"prefillWorker.replicas":     "prefillWorker: is not used by profile",
		`worker.nodeSelector["a.b"]`: "unknown key",
	} {
		bad := config.Raw{Values: map[string]string{config.HFTokenKey: testToken, "profile": "agg", "namespace.name": "team-a", key: "1"}, Secrets: raw.Secrets}
		_, err := config.Parse(bad)
		require.Error(t, err, key)
		assert.Contains(t, err.Error(), want, key)
	}
}
