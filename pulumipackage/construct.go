package pulumipackage

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/emptypb"

	"minimax-m3/components"
	"minimax-m3/config"
	"minimax-m3/teamboundary"
)

// Provider is the package's resource provider: its schema and the Deployment's Construct.
type Provider struct {
	pulumirpc.UnimplementedResourceProviderServer
	host   *provider.HostClient
	schema []byte
	// options are the program's options every Deployment is built with (a test's reader).
	options components.Options
}

// NewProvider serves schema (the embedded provider/schema.json) for the engine behind host.
func NewProvider(host *provider.HostClient, schema []byte, o components.Options) *Provider {
	return &Provider{host: host, schema: schema, options: o}
}

// Main runs the plugin: the engine starts it and talks to it over gRPC.
func Main(schema []byte) error {
	return provider.Main(Name, func(host *provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
		return NewProvider(host, schema, components.Options{}), nil
	})
}

// GetPluginInfo reports the package's version.
func (p *Provider) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: Version}, nil
}

// GetSchema returns the package's schema.
func (p *Provider) GetSchema(_ context.Context, req *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	if v := req.GetVersion(); v != 0 {
		return nil, fmt.Errorf("unsupported schema version %d", v)
	}
	return &pulumirpc.GetSchemaResponse{Schema: string(p.schema)}, nil
}

// Configure takes secrets and outputs as they are: the package has no provider config.
func (p *Provider) Configure(context.Context, *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	return &pulumirpc.ConfigureResponse{AcceptSecrets: true, SupportsPreview: true, AcceptResources: true, AcceptOutputs: true}, nil
}

// Construct builds a Deployment, or a Site, from a program's inputs.
func (p *Provider) Construct(ctx context.Context, req *pulumirpc.ConstructRequest) (*pulumirpc.ConstructResponse, error) {
	switch req.GetType() {
	case DeploymentToken:
	case teamboundary.SiteToken:
		return p.constructSite(ctx, req)
	default:
		return nil, fmt.Errorf("unknown resource type %s (this package has %s and %s)", req.GetType(), DeploymentToken, teamboundary.SiteToken)
	}
	inputs, err := inputsOf(req)
	if err != nil {
		return nil, err
	}
	raw, err := Raw(inputs)
	if err != nil {
		return nil, err
	}
	_, providerGiven := req.GetProviders()["kubernetes"]
	return provider.Construct(ctx, req, p.host.EngineConn(), func(pctx *pulumi.Context, _, name string, in provider.ConstructInputs, opts pulumi.ResourceOption) (*provider.ConstructResult, error) {
		c, err := components.ParseConfig(raw)
		if err != nil {
			return nil, err
		}
		args := &components.DeploymentArgs{Config: c, Kubeconfig: raw.Kubeconfig(), ProviderGiven: providerGiven, Options: p.options}
		// The token as the program passed it (a secret output, perhaps of another resource).
		var token struct {
			HFToken pulumi.StringInput `pulumi:"hfToken"`
		}
		if err := in.CopyTo(&token); err != nil {
			return nil, err
		}
		args.HFToken = token.HFToken
		d, err := components.NewDeployment(pctx, name, args, opts)
		if err != nil {
			return nil, err
		}
		state := components.Outputs(&c, d)
		return &provider.ConstructResult{URN: d.URN(), State: state}, nil
	})
}

// inputsOf are a Construct request's inputs, secrets, unknowns and outputs kept.
func inputsOf(req *pulumirpc.ConstructRequest) (resource.PropertyMap, error) {
	inputs, err := plugin.UnmarshalProperties(req.GetInputs(), plugin.MarshalOptions{
		KeepSecrets: true, KeepUnknowns: true, KeepOutputValues: true, KeepResources: true,
	})
	if err != nil {
		return nil, fmt.Errorf("reading the inputs: %w", err)
	}
	return inputs, nil
}

// Raw is the Deployment's inputs as a stack's config would hold them: every config key's value
// (a string as it is, anything else as JSON), the token and kubeconfig marked secret. A value still
// unknown (another resource's output during a preview) is refused, named by its input: the config
// decides which objects exist and is checked against the cluster before any is touched. The token
// alone may be unknown: only the Secret holding it needs it.
func Raw(inputs resource.PropertyMap) (config.Raw, error) {
	raw := config.Raw{Values: map[string]string{}, Secrets: map[string]bool{}}
	var ps config.Problems
	for _, key := range inputs.StableKeys() {
		k, v := string(key), inputs[key]
		if k == config.HFTokenKey {
			// A token is a non-empty string, or not known yet (another resource's output).
			token, _, known := plainValue(v)
			switch s, ok := token.(string); {
			case v.IsNull() || known && token == nil: // none given (a secret or output of null too)
			case known && (!ok || strings.TrimSpace(s) == ""):
				ps.Add(k, "must be the Hugging Face token, a non-empty string")
			default:
				raw.Values[k], raw.Secrets[k] = "<given>", true
			}
			continue
		}
		plain, secret, known := plainValue(v)
		switch {
		case !known:
			ps.Add(k, "is not known yet (another resource's output, during a preview): the Deployment's settings must be known when it is previewed, "+
				"since they decide which objects exist and are checked against the cluster first; pass a plain value or a stack reference's output")
			continue
		case plain == nil:
			continue
		}
		if config.IsSecretKey(k) {
			secret = true
		}
		if s, ok := plain.(string); ok {
			raw.Values[k] = s
		} else {
			b, err := json.Marshal(plain)
			if err != nil {
				ps.Add(k, "cannot be read: %v", err)
				continue
			}
			raw.Values[k] = string(b)
		}
		raw.Secrets[k] = secret
	}
	if len(ps) > 0 {
		return raw, ps
	}
	return raw, nil
}

// plainValue is v without secrets and output wrappers: its plain value, whether any of it was
// secret, and whether all of it is known.
func plainValue(v resource.PropertyValue) (value any, secret, known bool) {
	switch {
	case v.IsComputed():
		return nil, false, false
	case v.IsOutput():
		o := v.OutputValue()
		if !o.Known {
			return nil, o.Secret, false
		}
		value, secret, known = plainValue(o.Element)
		return value, secret || o.Secret, known
	case v.IsSecret():
		value, _, known = plainValue(v.SecretValue().Element)
		return value, true, known
	case v.IsArray():
		out, secret, known := make([]any, 0, len(v.ArrayValue())), false, true
		for _, e := range v.ArrayValue() {
			x, s, k := plainValue(e)
			out, secret, known = append(out, x), secret || s, known && k
		}
		return out, secret, known
	case v.IsObject():
		out, secret, known := map[string]any{}, false, true
		for key, e := range v.ObjectValue() {
			x, s, k := plainValue(e)
			out[string(key)], secret, known = x, secret || s, known && k
		}
		return out, secret, known
	case v.IsResourceReference():
		return nil, false, true
	}
	return v.V, false, true
}
