package unit

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"

	"minimax-m3/components"
	"minimax-m3/config"
	"minimax-m3/pulumipackage"
	"minimax-m3/teamboundary"
)

// The package's schema is what the config's Go types give (regenerate it with `go run
// ./cmd/configschema`): every config key a stack may set is an input of the Deployment, the two
// secrets marked secret, every type it refers to declared, and its outputs are the program's stack
// outputs.
func TestThePackageSchemaIsTheConfigTypes(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	want, err := pulumipackage.Schema(filepath.Join(root, "config"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(root, pulumipackage.SchemaFile))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "%s is not what the config types give: run go run ./cmd/configschema", pulumipackage.SchemaFile)

	var spec struct {
		Resources map[string]struct {
			IsComponent     bool                      `json:"isComponent"`
			InputProperties map[string]map[string]any `json:"inputProperties"`
			Properties      map[string]map[string]any `json:"properties"`
		} `json:"resources"`
		Types map[string]any `json:"types"`
	}
	require.NoError(t, json.Unmarshal(want, &spec))
	site, ok := spec.Resources[teamboundary.SiteToken]
	require.True(t, ok, "the site's install is the package's other resource")
	assert.True(t, site.IsComponent)
	assert.ElementsMatch(t, []string{"teams", "workerRuntimeClass", "priorityClasses", "portalUser", "portalServiceAccount", "workspaces"},
		slices.Collect(maps.Keys(site.InputProperties)))
	d, ok := spec.Resources[pulumipackage.DeploymentToken]
	require.True(t, ok, "the Deployment is the package's resource")
	assert.True(t, d.IsComponent)
	assert.ElementsMatch(t, config.Keys(), slices.Collect(maps.Keys(d.InputProperties)), "every config key is an input")
	for _, k := range []string{config.HFTokenKey, config.KubeconfigKey} {
		assert.Equal(t, true, d.InputProperties[k]["secret"], k)
	}
	for _, m := range regexp.MustCompile(`"#/types/([^"]+)"`).FindAllStringSubmatch(string(want), -1) {
		assert.Contains(t, spec.Types, m[1], "a referred type is declared")
	}

	// Its outputs are the program's (the stack identity aside: the program's own bookkeeping).
	for _, overrides := range []map[string]string{nil, {"minimax-m3:smokeTest": `{"enabled":true}`}} {
		r := mustRun(t, "agg", overrides)
		for k := range r.outputs {
			if k != components.IdentityOutput {
				assert.Contains(t, d.Properties, k, "output %s is in the schema", k)
			}
		}
	}
}

// The package's Construct reads a program's inputs as a stack's config: a string as it is,
// anything else as JSON, the secrets marked. A setting another resource's output leaves unknown
// during a preview is refused, named by its key: it decides which objects exist. The token alone
// may be unknown.
func TestThePackageReadsInputsAsConfig(t *testing.T) {
	inputs := resource.PropertyMap{
		"profile":   resource.NewProperty("disagg"),
		"namespace": resource.NewProperty(resource.PropertyMap{"name": resource.NewProperty("team-a")}),
		"decodeWorker": resource.NewProperty(resource.PropertyMap{
			"replicas": resource.NewProperty(2.0),
			"vllm":     resource.NewProperty(resource.PropertyMap{"maxNumSeqs": resource.NewProperty(64.0)}),
		}),
		"kubeconfig": resource.MakeSecret(resource.NewProperty("apiVersion: v1")),
		"hfToken":    resource.MakeComputed(resource.NewProperty("")),
	}
	raw, err := pulumipackage.Raw(inputs)
	require.NoError(t, err)
	assert.Equal(t, "disagg", raw.Values["profile"])
	assert.JSONEq(t, `{"name":"team-a"}`, raw.Values["namespace"])
	assert.JSONEq(t, `{"replicas":2,"vllm":{"maxNumSeqs":64}}`, raw.Values["decodeWorker"])
	assert.True(t, raw.Secrets[config.KubeconfigKey])
	assert.True(t, raw.Secrets[config.HFTokenKey], "an unknown token is a token")
	c, err := config.Parse(raw)
	require.NoError(t, err)
	assert.Equal(t, 2, c.DecodeWorker.Replicas)
	assert.Equal(t, "team-a", c.Namespace.Name)

	// Unknown settings: refused, each named.
	inputs["namespace"] = resource.NewProperty(resource.PropertyMap{"name": resource.MakeComputed(resource.NewProperty(""))})
	inputs["graphName"] = resource.NewProperty(resource.Output{Known: false})
	_, err = pulumipackage.Raw(inputs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:namespace: is not known yet")
	assert.Contains(t, err.Error(), "minimax-m3:graphName: is not known yet")

	// A token is a non-empty string.
	for _, token := range []resource.PropertyValue{resource.NewProperty(""), resource.NewProperty(3.0), resource.MakeSecret(resource.NewProperty(" "))} {
		_, err = pulumipackage.Raw(resource.PropertyMap{"hfToken": token})
		require.Error(t, err, token.String())
		assert.Contains(t, err.Error(), "minimax-m3:hfToken: must be the Hugging Face token", token.String())
	}

	// None given: null, as a secret too.
	raw, err = pulumipackage.Raw(resource.PropertyMap{"hfToken": resource.MakeSecret(resource.NewNullProperty())})
	require.NoError(t, err)
	assert.NotContains(t, raw.Values, config.HFTokenKey)

	// A secret where a plain setting belongs is refused by the config's own rule.
	raw, err = pulumipackage.Raw(resource.PropertyMap{"image": resource.MakeSecret(resource.NewProperty("nvcr.io/x:1"))})
	require.NoError(t, err)
	_, err = components.ParseConfig(raw)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:image: is not a secret value")
}

// A Go program uses the Deployment as a component of its own: its Kubernetes provider and its
// transformations reach every object, the component makes no provider of its own and carries no
// alias of the program's old names; without a provider it makes its own, as the program does. Bad
// settings stop it before anything is registered, named by their keys.
func TestAGoProgramUsesTheDeploymentAsAComponent(t *testing.T) {
	deploy := func(t *testing.T, c config.Config, withProvider bool) ([]recorded, error) {
		m := &mocks{}
		err := pulumi.RunErr(func(ctx *pulumi.Context) error {
			opts := []pulumi.ResourceOption{pulumi.Transformations([]pulumi.ResourceTransformation{
				func(args *pulumi.ResourceTransformationArgs) *pulumi.ResourceTransformationResult {
					// The program's own rule: every object is protected.
					return &pulumi.ResourceTransformationResult{Props: args.Props, Opts: append(args.Opts, pulumi.Protect(true))}
				},
			})}
			if withProvider {
				site, err := kubernetes.NewProvider(ctx, "site", &kubernetes.ProviderArgs{EnableConfigMapMutable: pulumi.Bool(true)})
				if err != nil {
					return err
				}
				opts = append(opts, pulumi.Provider(site))
			}
			d, err := components.NewDeployment(ctx, "m3", &components.DeploymentArgs{
				Config: c, HFToken: pulumi.String(testToken), Options: components.Options{Cluster: fakeCluster{}},
			}, opts...)
			if err != nil {
				return err
			}
			ctx.Export("frontendService", components.Outputs(&c, d)["frontendService"])
			return nil
		}, pulumi.WithMocks("consumer", "dev", m))
		return m.resources, err
	}
	c := config.Defaults(config.Aggregated)
	c.Namespace.Name = "team-a"

	t.Run("with the program's provider", func(t *testing.T) {
		resources, err := deploy(t, c, true)
		require.NoError(t, err)
		var providers, objects int
		for _, r := range resources {
			switch {
			case r.Type == "pulumi:providers:kubernetes":
				providers++
				assert.Equal(t, "site", r.Name, "only the program's provider")
			case strings.HasPrefix(r.Type, "kubernetes:"):
				objects++
				assert.Contains(t, r.RPC.GetProvider(), "::site::", "%s %s uses the program's provider", r.Type, r.Name)
				assert.True(t, r.RPC.GetProtect(), "%s %s: the program's transformation reached it", r.Type, r.Name)
				for _, a := range r.RPC.GetAliases() {
					assert.Empty(t, a.GetUrn(), "%s %s: no alias of the program's old names", r.Type, r.Name)
				}
			}
		}
		assert.Equal(t, 1, providers)
		assert.Greater(t, objects, 5)
	})

	t.Run("without one", func(t *testing.T) {
		resources, err := deploy(t, c, false)
		require.NoError(t, err)
		var own []recorded
		for _, r := range resources {
			if r.Type == "pulumi:providers:kubernetes" {
				own = append(own, r)
			}
		}
		require.Len(t, own, 1, "the component makes its own provider")
		assert.Contains(t, own[0].RPC.GetParent(), "minimax-m3:index:Deployment::m3", "as its child")
		assert.Equal(t, true, own[0].Inputs["enableConfigMapMutable"].V)
		for _, r := range resources {
			if strings.HasPrefix(r.Type, "kubernetes:") {
				assert.Contains(t, r.RPC.GetProvider(), "pulumi:providers:kubernetes::kubernetes::", "%s %s uses it", r.Type, r.Name)
			}
		}
	})

	t.Run("bad settings", func(t *testing.T) {
		bad := c
		bad.Worker.Replicas = 0
		bad.Namespace.Name = "Team_A"
		resources, err := deploy(t, bad, true)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "worker.replicas")
		assert.Contains(t, err.Error(), "namespace.name")
		for _, r := range resources {
			assert.NotEqual(t, "minimax-m3:index:Deployment", r.Type, "nothing of the Deployment was registered")
		}
	})
}

// The package's second resource is the site's install: its inputs read into the site's arguments,
// each problem named by its input before anything is registered; an input still unknown is refused
// (the site's objects depend on every one).
func TestThePackageReadsTheSitesInputs(t *testing.T) {
	teams := resource.NewProperty(resource.PropertyMap{"team-a": resource.NewProperty([]resource.PropertyValue{resource.NewProperty("a-prod")})})
	args, err := pulumipackage.SiteArgs(resource.PropertyMap{
		"teams":                teams,
		"workerRuntimeClass":   resource.NewProperty("nvidia"),
		"priorityClasses":      resource.NewProperty([]resource.PropertyValue{resource.NewProperty("inference-high")}),
		"portalServiceAccount": resource.NewProperty("portal/minimax-m3-portal"),
		"workspaces":           resource.NewProperty("pulumi-stacks"),
	})
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"team-a": {"a-prod"}}, args.Teams)
	assert.Equal(t, []string{"inference-high"}, args.PriorityClasses)
	assert.Equal(t, "pulumi-stacks", args.Workspaces)
	require.NotNil(t, args.Portal)
	assert.Equal(t, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "portal", Name: "minimax-m3-portal"}, *args.Portal)

	for _, tc := range []struct {
		inputs resource.PropertyMap
		want   string
	}{
		{resource.PropertyMap{"teams": resource.MakeComputed(resource.NewProperty("")), "workerRuntimeClass": resource.NewProperty("nvidia")}, "teams: not known yet"},
		{resource.PropertyMap{"teams": teams}, "workerRuntimeClass: name the GPU workers' RuntimeClass"},
		{resource.PropertyMap{"teams": teams, "workerRuntimeClass": resource.NewProperty("nvidia"), "portalServiceAccount": resource.NewProperty("portal")}, `portalServiceAccount: "portal" is not namespace/name`},
		{resource.PropertyMap{"teams": teams, "workerRuntimeClass": resource.NewProperty("nvidia"), "portalUser": resource.NewProperty("p"), "portalServiceAccount": resource.NewProperty("a/b")}, "portalServiceAccount: name the portal's identity once"},
		{resource.PropertyMap{"teams": teams, "workerRuntimeClass": resource.NewProperty("nvidia"), "team": resource.NewProperty("x")}, `unknown field "team"`},
		{resource.PropertyMap{"teams": teams, "workerRuntimeClass": resource.NewProperty("nvidia"), "workspaces": resource.NewProperty("Pulumi Stacks")}, "workspaces:"},
	} {
		_, err := pulumipackage.SiteArgs(tc.inputs)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
}
