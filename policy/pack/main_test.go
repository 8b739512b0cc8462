package main

import (
	"os"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/policyx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/policy"
)

// The pack holds every rule that reads objects as they will be, mandatory, and none that needs a
// preview's steps.
func TestPackHoldsTheObjectAndStackRules(t *testing.T) {
	p, err := pack()
	require.NoError(t, err)
	var got, want []string
	for _, pol := range p.Policies() {
		got = append(got, pol.Name())
		assert.Equal(t, policyx.EnforcementLevelMandatory, pol.EnforcementLevel(), pol.Name())
	}
	for _, r := range policy.Rules {
		if r.Scope != policy.ScopeChange {
			want = append(want, r.Name)
		}
	}
	assert.Equal(t, want, got)
	assert.NotContains(t, got, "keep-model-cache")
}

// Inputs reach the rules as the engine's events show them: unknowns as the engine's unknown
// string, secrets and outputs by their value.
func TestPlainShowsInputsAsTheEngineDoes(t *testing.T) {
	m := resource.PropertyMap{
		"name":   resource.NewProperty("a"),
		"later":  resource.MakeComputed(resource.NewProperty("")),
		"secret": resource.MakeSecret(resource.NewProperty("hf_x")),
		"output": resource.NewProperty(resource.Output{Element: resource.NewProperty(resource.PropertyMap{"k": resource.NewProperty("v")}), Known: true}),
		"unset":  resource.NewProperty(resource.Output{Known: false}),
		"list":   resource.NewProperty([]resource.PropertyValue{resource.MakeSecret(resource.NewProperty(1.0))}),
	}
	assert.Equal(t, map[string]any{
		"name": "a", "later": plugin.UnknownStringValue, "secret": "hf_x", "output": map[string]any{"k": "v"},
		"unset": plugin.UnknownStringValue, "list": []any{1.0},
	}, plain(m))
}

type manager struct{ reported []string }

func (m *manager) ReportViolation(message, urn string) {
	m.reported = append(m.reported, urn+" "+message)
}

// A violation is reported at the resource the rule read.
func TestReportNamesTheResource(t *testing.T) {
	rule, job := ruleNamed(t, "pinned-images"), downloadJob("busybox")
	var m manager
	report(&m, rule, []policyx.AnalyzerResource{job})
	require.Len(t, m.reported, 1)
	assert.Equal(t, job.URN+` Job inference/download container main: image "busybox" has no tag or digest (it means latest)`, m.reported[0])
}

// The site's registries come from MINIMAX_M3_IMAGE_REGISTRIES, as the deploy workflow sets them from
// the repository variable the PR check reads: an image of the site's mirror passes
// allowed-registries with it, and only with it.
func TestTheSitesRegistriesComeFromTheEnvironment(t *testing.T) {
	rule, job := ruleNamed(t, "allowed-registries"), downloadJob("mirror.example.com/nvidia/vllm-runtime:1.0")
	var m manager
	report(&m, rule, []policyx.AnalyzerResource{job})
	assert.Len(t, m.reported, 1, "the recipe's registries by default")
	t.Setenv(RegistriesEnv, " mirror.example.com/nvidia, ,nvcr.io/nvidia")
	m = manager{}
	report(&m, rule, []policyx.AnalyzerResource{job})
	assert.Empty(t, m.reported)
	assert.Equal(t, []string{"mirror.example.com/nvidia", "nvcr.io/nvidia"}, Registries(os.Getenv(RegistriesEnv)))
}

func ruleNamed(t *testing.T, name string) policy.Rule {
	t.Helper()
	for _, r := range policy.Rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no rule %s", name)
	return policy.Rule{}
}

// downloadJob is a Job inference/download whose one container runs image, as the engine hands it over.
func downloadJob(image string) policyx.AnalyzerResource {
	job := policyx.AnalyzerResource{Type: "kubernetes:batch/v1:Job", URN: "urn:pulumi:s::p::kubernetes:batch/v1:Job::download", Name: "download"}
	job.Properties = resource.FromResourcePropertyMap(resource.NewPropertyMapFromMap(map[string]any{
		"metadata": map[string]any{"name": "download", "namespace": "inference"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "image": image}},
		}}},
	}))
	return job
}
