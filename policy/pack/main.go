package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/policyx"

	"minimax-m3/policy"
)

func main() {
	if err := policyx.Main(func(*pulumi.Context) (policyx.PolicyPack, error) { return pack() }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// pack is every rule that needs no preview steps, mandatory.
func pack() (policyx.PolicyPack, error) {
	var ps []policyx.Policy
	for _, r := range policy.Rules {
		switch r.Scope {
		case policy.ScopeObject:
			ps = append(ps, policyx.NewResourceValidationPolicy(r.Name, policyx.ResourceValidationPolicyArgs{
				Description:      r.Description,
				EnforcementLevel: policyx.EnforcementLevelMandatory,
				ValidateResource: func(_ context.Context, args policyx.ResourceValidationArgs) error {
					report(args.Manager, r, []policyx.AnalyzerResource{args.Resource})
					return nil
				},
			}))
		case policy.ScopeStack:
			ps = append(ps, policyx.NewStackValidationPolicy(r.Name, policyx.StackValidationPolicyArgs{
				Description:      r.Description,
				EnforcementLevel: policyx.EnforcementLevelMandatory,
				ValidateStack: func(_ context.Context, args policyx.StackValidationArgs) error {
					report(args.Manager, r, args.Resources)
					return nil
				},
			}))
		}
	}
	return policyx.NewPolicyPack("minimax-m3", semver.MustParse("1.0.0"), policyx.EnforcementLevelMandatory, ps)
}

// RegistriesEnv names the site's image registries for rule allowed-registries, comma-separated, as
// cmd/policy's -image-registries takes them (unset: the recipe's): the workflow that deploys sets it
// from the same repository variable the PR check reads, never from a stack file a change could edit.
const RegistriesEnv = "MINIMAX_M3_IMAGE_REGISTRIES"

// PriorityClassesEnv names the site's priority classes for rule pod-security, comma-separated, as
// cmd/policy's -priority-classes takes them (unset: none), from the site as RegistriesEnv is.
const PriorityClassesEnv = "MINIMAX_M3_PRIORITY_CLASSES"

// Registries splits a comma-separated list of registries, dropping empty entries.
func Registries(list string) []string {
	var out []string
	for _, r := range strings.Split(list, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// report checks resources as objects the change creates, and reports each violation at the
// resource it names (the stack, when it names several).
func report(m policyx.PolicyManager, r policy.Rule, rs []policyx.AnalyzerResource) {
	steps := make([]policy.Step, 0, len(rs))
	for _, res := range rs {
		steps = append(steps, policy.Step{
			URN: res.URN, Type: res.Type, Name: res.Name, Op: "create",
			New: plain(resource.ToResourcePropertyMap(res.Properties)),
		})
	}
	urn := ""
	if len(rs) == 1 {
		urn = rs[0].URN
	}
	for _, v := range r.Check(policy.Plan{Steps: steps, ImageRegistries: Registries(os.Getenv(RegistriesEnv)), PriorityClasses: Registries(os.Getenv(PriorityClassesEnv))}) {
		m.ReportViolation(v.Resource+": "+v.Message, urn)
	}
}

// plain is a resource's inputs as the engine's events show them, the form package policy reads:
// unknown values (during a preview) as the engine's unknown string, secrets and outputs by their
// value.
func plain(m resource.PropertyMap) map[string]any {
	var repl func(resource.PropertyValue) (any, bool)
	repl = func(v resource.PropertyValue) (any, bool) {
		switch {
		case v.IsComputed(), v.IsOutput() && !v.OutputValue().Known:
			return plugin.UnknownStringValue, true
		case v.IsOutput():
			return v.OutputValue().Element.MapRepl(nil, repl), true
		case v.IsSecret():
			return v.SecretValue().Element.MapRepl(nil, repl), true
		}
		return nil, false
	}
	return m.MapRepl(nil, repl)
}
