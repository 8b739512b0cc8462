package unit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"minimax-m3/config"
	"minimax-m3/pulumipackage"
)

// The stack files' JSON Schema is what the Go types say (regenerate it with `go run
// ./cmd/configschema`), and it agrees with the program: the project's stack files and the example
// sites' pass both it and the program's own parsing; a misspelled key or a value of the wrong type
// fails both, at the same key.
func TestTheStackFileSchemaIsTheConfigTypes(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	want, err := config.StackFileSchema(filepath.Join(root, "config"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(root, config.SchemaFile))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "%s is not what the config types give: run go run ./cmd/configschema", config.SchemaFile)

	schema := compileSchema(t, want)
	files, err := filepath.Glob(filepath.Join(root, "examples", "sites", "Pulumi.*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 2, "two example sites")
	for _, f := range append(files, filepath.Join(root, "Pulumi.agg.yaml"), filepath.Join(root, "Pulumi.disagg.yaml")) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.NoError(t, schema.Validate(yamlValue(t, b)), f)
	}
	// The example sites deploy the recipe's images (through a mirror, the same repository and tag).
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if img := regexp.MustCompile(`minimax-m3:image: (\S+)`).FindSubmatch(b); img != nil {
			assert.True(t, strings.HasSuffix(config.Defaults(config.Aggregated).Image, strings.TrimPrefix(string(img[1]), "registry.eu.example.com/nvcr-mirror/")), "%s: %s", f, img[1])
		}
	}
	// The example sites are whole: the program takes them as they are, once the token a site
	// keeps as a stack secret is set (the project's own stack files leave the site's namespace and
	// token to the user).
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.NoError(t, parseStackFile(t, b, !strings.Contains(string(b), "existingSecret: true")), f)
	}

	// The forms Pulumi stores a number or a boolean in (`--type string`, a hand-edited file) pass
	// both, as they do the program.
	// So do what the docs tell users to write: a probe removed with null (or its text, as
	// `--path … null` stores it), a list as JSON text (`--path … '[]'`), a map entry removed with
	// null, a quantity YAML reads as a number.
	for _, stored := range []string{
		"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x, create: \"false\"}\n  minimax-m3:worker: {replicas: \"2\"}\n",
		"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:worker: {probes: {startup: null, liveness: \"null\"}}\n",
		"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:worker: {scheduling: {tolerations: \"[]\"}}\n",
		"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:worker: {resources: {limits: {cpu: 72, memory: null}}}\n",
		"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: \"{\\\"name\\\": \\\"x\\\"}\"\n  minimax-m3:gpusPerNode: \" +4 \"\n  minimax-m3:adopt: \" True \"\n",
		// What `pulumi new` writes for its questions: keys set without --path.
		"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace.name: x\n  minimax-m3:modelCache.storageClass: \"\"\n",
	} {
		assert.NoError(t, schema.Validate(yamlValue(t, []byte(stored))), stored)
		assert.NoError(t, parseStackFile(t, []byte(stored), true), stored)
	}

	for _, bad := range []struct{ file, key string }{
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:workers: {replicas: 2}\n", "workers"},
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:worker: {replicas: two}\n", "worker"},
		{"config:\n  minimax-m3:profile: aggregated\n  minimax-m3:namespace: {name: x}\n", "profile"},
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x, creat: true}\n", "namespace"},
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:workers.replicas: 2\n", "workers.replicas"},
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace.name: {secure: v1:abc}\n", "namespace.name"},
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:hfToken: hf_in_plain_text\n", "hfToken"},
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:graphName: {secure: v1:abc}\n", "graphName"},
	} {
		err := schema.Validate(yamlValue(t, []byte(bad.file)))
		require.Error(t, err, bad.file)
		assert.Contains(t, err.Error(), "minimax-m3:"+bad.key, "the schema names the key")
		err = parseStackFile(t, []byte(bad.file), false)
		require.Error(t, err, bad.file)
		assert.Contains(t, err.Error(), "minimax-m3:"+bad.key, "as the program does")
	}
}

func compileSchema(t *testing.T, b []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("stack-config.schema.json", doc))
	s, err := c.Compile("stack-config.schema.json")
	require.NoError(t, err)
	return s
}

// yamlValue is a YAML document as JSON Schema validators take it (JSON's types).
func yamlValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(b, &v))
	j, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(j, &out))
	return out
}

// parseStackFile parses a stack file's config as the program does (a secret counts as set; with
// token, the Hugging Face token is set as one).
func parseStackFile(t *testing.T, b []byte, token bool) error {
	t.Helper()
	plain, secure, err := config.StackFileValues(b)
	require.NoError(t, err)
	raw := config.Raw{Values: map[string]string{}, Secrets: map[string]bool{}}
	for k, v := range plain {
		raw.Values[strings.TrimPrefix(k, config.Namespace+":")] = v
	}
	for _, k := range secure {
		k = strings.TrimPrefix(k, config.Namespace+":")
		raw.Values[k], raw.Secrets[k] = "a-secret", true
	}
	if token {
		raw.Values[config.HFTokenKey], raw.Secrets[config.HFTokenKey] = "hf_example", true
	}
	_, err = config.Parse(raw)
	return err
}

// The closed choices are one table (config.Choices): the stack files' schema lists each as the
// field's enum (with "" where unset takes the default), the package schema as an enum type the
// field refers to, and the program refuses any other value at the field's key, before anything
// runs, naming the choices. A stack file with a value outside the table fails the schema too.
func TestTheClosedChoicesAreOneTableForTheValidationAndBothSchemas(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	stack, err := config.Schema(filepath.Join(root, "config"))
	require.NoError(t, err)
	pkg, err := pulumipackage.Schema(filepath.Join(root, "config"))
	require.NoError(t, err)
	var spec struct {
		Resources map[string]struct {
			InputProperties map[string]map[string]any `json:"inputProperties"`
		} `json:"resources"`
		Types map[string]struct {
			Type       string                    `json:"type"`
			Enum       []map[string]any          `json:"enum"`
			Properties map[string]map[string]any `json:"properties"`
		} `json:"types"`
	}
	require.NoError(t, json.Unmarshal(pkg, &spec))
	require.NotEmpty(t, config.Choices)
	for _, c := range config.Choices {
		owner := stack
		props := spec.Resources[pulumipackage.DeploymentToken].InputProperties
		if c.Owner != reflect.TypeFor[config.Config]() {
			owner = stack.Definitions[c.Owner.Name()]
			props = spec.Types[pulumipackage.Name+":index:"+c.Owner.Name()].Properties
		}
		require.NotNil(t, owner, c.Name)
		p, ok := owner.Properties.Get(c.Field)
		require.True(t, ok, "%s: %s.%s", c.Name, c.Owner.Name(), c.Field)
		var want []any
		if c.Unset {
			want = append(want, "")
		}
		for _, v := range c.Values {
			want = append(want, v)
		}
		assert.Equal(t, want, p.Enum, "%s: the stack files' schema", c.Name)

		token := pulumipackage.Name + ":index:" + c.Name
		assert.Equal(t, "#/types/"+token, props[c.Field]["$ref"], "%s: the package's field refers to its enum", c.Name)
		var values []string
		for _, e := range spec.Types[token].Enum {
			values = append(values, e["value"].(string))
		}
		assert.Equal(t, c.Values, values, "%s: the package's enum", c.Name)
		assert.Equal(t, "string", spec.Types[token].Type)
	}

	// A value outside the table: the schema and the program refuse it, at its key.
	stackFile, err := config.StackFileSchema(filepath.Join(root, "config"))
	require.NoError(t, err)
	schema := compileSchema(t, stackFile)
	for _, bad := range []struct{ file, key, says string }{
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:worker: {vllm: {kvCacheDtype: fp4}}\n",
			"worker.vllm.kvCacheDtype", `"fp4" is not one of auto, bfloat16, fp8`},
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x}\n  minimax-m3:worker: {scheduling: {tolerations: [{key: a, effect: NoExec}]}}\n",
			"worker.scheduling.tolerations[0].effect", `"NoExec" is not one of NoSchedule, PreferNoSchedule, NoExecute`},
		{"config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace: {name: x, podSecurity: restricted}\n",
			"namespace.podSecurity", `"restricted" is not one of baseline, privileged`},
	} {
		// The same file with a choice of the table passes both: the refusal is the value's.
		good := strings.NewReplacer("fp4", "fp8", "NoExec}", "NoExecute}", "restricted", "baseline").Replace(bad.file)
		assert.NoError(t, schema.Validate(yamlValue(t, []byte(good))), good)
		assert.NoError(t, parseStackFile(t, []byte(good), true), good)
		assert.Error(t, schema.Validate(yamlValue(t, []byte(bad.file))), bad.file)
		err := parseStackFile(t, []byte(bad.file), true)
		require.Error(t, err, bad.file)
		assert.Contains(t, err.Error(), "minimax-m3:"+bad.key+": "+bad.says)
	}
}
