package components

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
	"minimax-m3/manifest"
	"minimax-m3/preflight"
)

// Options change how the program runs, never what a stack deploys.
type Options struct {
	// RenderDirectory writes every object as YAML there instead of applying it: the render command's
	// mode, which is not a stack setting (a change of it would replace every resource).
	RenderDirectory string
	// ConfigKeys are the full keys (`minimax-m3:...`) the stack sets, so that an unknown one is an
	// error. nil reads them from the environment the Pulumi CLI gives a program (PULUMI_CONFIG); an
	// inline Automation API program is handed them by its caller.
	ConfigKeys []string
	// Kubeconfig is the kubeconfig file the ownership check reads the cluster with; empty uses what
	// the provider uses (KUBECONFIG, else ~/.kube/config), with the context kubernetes.context.
	Kubeconfig string
	// Cluster reads existing objects for the ownership check instead (tests).
	Cluster ObjectReader
}

// Program is the stack's Pulumi program as `pulumi up` runs it (main.go).
func Program(ctx *pulumi.Context) error { return NewProgram(Options{})(ctx) }

// NewProgram returns the program with options; the Automation API runs it inline.
func NewProgram(o Options) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		outputs, err := Deploy(ctx, o)
		if err != nil {
			return err
		}
		for k, v := range outputs {
			ctx.Export(k, v)
		}
		return nil
	}
}

// Deploy reads the stack's config, checks it against the cluster, builds every resource and returns
// the stack outputs. Bad config and objects the stack must not take over stop it before any
// resource is registered.
func Deploy(ctx *pulumi.Context, o Options) (pulumi.Map, error) {
	c, raw, err := LoadConfig(ctx, o.ConfigKeys)
	if err != nil {
		return nil, err
	}
	d, err := deploy(ctx, "minimax-m3", &c, raw, o, nil)
	if err != nil {
		return nil, err
	}
	outputs := Outputs(&c, d)
	outputs[IdentityOutput] = pulumi.String(StackIdentity(ctx))
	return outputs, nil
}

// target is where deploy registers the Deployment: nil as a stack's program (its own provider
// beside the component, the stack's previous outputs read back), else as a component of another
// program (the package).
type target struct {
	// opts are the component's options (parent, providers, transforms).
	opts []pulumi.ResourceOption
	// ownProvider makes the component a Kubernetes provider of its own from the config; false
	// leaves the provider to opts.
	ownProvider bool
	// token is the Hugging Face token, which may be unknown until another resource exists.
	token pulumi.StringInput
}

// deploy checks c against the cluster and registers the Deployment named name.
func deploy(ctx *pulumi.Context, name string, c *config.Config, raw config.Raw, o Options, as *target) (*MiniMaxM3, error) {
	// One reader of the cluster, on the provider's kubeconfig (a test's own reader instead), for
	// the ownership check and the smoke test's result. A render reads no cluster.
	var (
		reader ObjectReader
		// previous is what the stack's last update exported (none for a component of another
		// program, which has no outputs of its own to read back: it starts as a new stack does).
		previous previousStack
		// readyBefore is the graph's generation an earlier up saw Ready; readyBeforeOthers the
		// same for the stack's other graphs, by name.
		readyBefore       int64
		readyBeforeOthers map[string]int64
	)
	kubeconfig := raw.Kubeconfig()
	if kubeconfig != "" {
		if ps := checkKubeconfig(kubeconfig, c.Kubernetes.Context); len(ps) > 0 {
			return nil, ps
		}
	}
	if as != nil && !as.ownProvider {
		// The objects go through the caller's provider, whose cluster the component cannot ask it
		// for: a read that fails stops it, or no check would run.
		c.Kubernetes.RequireRead = true
	}
	if o.RenderDirectory == "" {
		reader = o.Cluster
		if reader == nil {
			r, err := cluster.New(o.Kubeconfig, c.Kubernetes.Context)
			if kubeconfig != "" {
				r, err = cluster.NewFromKubeconfig([]byte(kubeconfig), c.Kubernetes.Context)
			}
			switch {
			case err != nil && as != nil && !as.ownProvider:
				// The objects go through the caller's provider, whose cluster the component cannot
				// ask it for: it must be able to read one itself, or no check would run.
				var ps config.Problems
				ps.Add(config.KubeconfigKey, "the cluster cannot be read, so no check can run before anything is touched (ownership, placement): "+
					"pass the kubeconfig of the cluster the Deployment's provider writes to (the kubeconfig input, or KUBECONFIG): %v", err)
				return nil, ps
			case err != nil && c.Kubernetes.RequireRead:
				return nil, preflight.Unreadable(err)
			case err != nil:
				_ = ctx.Log.Warn("not checking for existing objects the stack would take over: "+err.Error(), nil)
			default:
				reader = r
			}
		}
		if reader != nil && as == nil {
			// A component in another program has no outputs of its own to read back: it starts
			// from none, as a new stack does.
			var err error
			if previous, err = previousOutputs(ctx); err != nil {
				return nil, err
			}
			if previous.Namespace == c.Namespace.Name && previous.GraphName == c.GraphName {
				readyBefore = previous.readyGeneration
				readyBeforeOthers = previous.readyGenerations
			}
		}
	}
	decided, err := preflight.Check(ctx.Context(), stackLog{ctx}, reader, c, preflight.Stack{Name: ctx.Stack(), Identity: StackIdentity(ctx), Previous: previous.Previous})
	if err != nil {
		return nil, err
	}
	if c.Speculative.Mode == config.SpeculativeSynthetic {
		_ = ctx.Log.Warn("BENCHMARK ONLY: speculativeDecoding.mode is synthetic: workers skip real EAGLE3 verification "+
			"(acceptance length "+manifest.FormatFloat(c.Speculative.SyntheticAcceptanceLength)+"), so responses are not the model's. "+
			"Never serve production traffic or evaluate accuracy with it.", nil)
	}
	providerArgs := &kubernetes.ProviderArgs{
		Context:           optionalString(c.Kubernetes.Context),
		ClusterIdentifier: pulumi.String(c.Kubernetes.ClusterIdentifier),
		// Update the speculative ConfigMap and the token Secret in place: replacing them (the
		// provider's default) deletes the object before creating it again under the same name, and
		// a worker starting in between fails on the missing key. Workers roll on a config change
		// through their checksum annotation instead.
		EnableConfigMapMutable: pulumi.Bool(true),
		EnableSecretMutable:    pulumi.Bool(true),
	}
	if kubeconfig != "" {
		// The stack's own kubeconfig, a secret in the provider's state as in its config.
		providerArgs.Kubeconfig = pulumi.ToSecret(pulumi.String(kubeconfig)).(pulumi.StringOutput)
	}
	if dir := o.RenderDirectory; dir != "" {
		msg := "rendering manifests to " + dir + " instead of applying them"
		if c.ModelDownload.Enabled && !c.HuggingFace.ExistingSecret {
			msg += "; the rendered Secret holds the Hugging Face token in plain text: keep that directory private and out of version control"
		}
		_ = ctx.Log.Warn(msg, nil)
		// The SDK fills an unset kubeconfig from $KUBECONFIG, which the provider refuses beside a
		// render directory: say "none" explicitly, a render reads no cluster.
		providerArgs = &kubernetes.ProviderArgs{RenderYamlToDirectory: pulumi.String(dir), Kubeconfig: pulumi.String("")}
	}
	args := &MiniMaxM3Args{Config: c, Decisions: decided, Results: jobResults(reader), GraphStatus: graphStatus(reader), Routes: routeWeights(reader), GraphReadyBefore: readyBefore, GraphsReadyBefore: readyBeforeOthers, Rendering: o.RenderDirectory != ""}
	if as != nil {
		args.Packaged = true
		if as.token != nil {
			args.HFToken = pulumi.ToSecret(as.token).(pulumi.StringOutput)
		}
		if as.ownProvider {
			args.Provider = providerArgs
		}
		return NewMiniMaxM3(ctx, name, args, as.opts...)
	}
	provider, err := kubernetes.NewProvider(ctx, "kubernetes", providerArgs)
	if err != nil {
		return nil, err
	}
	if t := raw.HFToken(); t != "" {
		args.HFToken = pulumi.ToSecret(pulumi.String(t)).(pulumi.StringOutput)
	}
	return NewMiniMaxM3(ctx, name, args, pulumi.Provider(provider))
}

// previousStack is what the stack's last update exported ("" before the first).
type previousStack struct {
	preflight.Previous
	// readyGeneration is the graph's generation its last successful up saw Ready (0: unknown).
	readyGeneration int64
	// readyGenerations is the same for the stack's other graphs (its graphs output), by name.
	readyGenerations map[string]int64
}

// previousOutputs reads the stack's last outputs through a reference to the stack itself.
func previousOutputs(ctx *pulumi.Context) (previousStack, error) {
	var p previousStack
	self, err := pulumi.NewStackReference(ctx, "self", &pulumi.StackReferenceArgs{Name: pulumi.String(StackIdentity(ctx))})
	if err != nil {
		return p, err
	}
	for name, dst := range map[string]*string{IdentityOutput: &p.Identity, "namespace": &p.Namespace, "graphName": &p.GraphName} {
		out, err := self.GetOutputDetails(name)
		if err != nil {
			return p, err
		}
		if out != nil {
			*dst, _ = out.Value.(string)
		}
	}
	out, err := self.GetOutputDetails(GraphReadyGenerationOutput)
	if err != nil {
		return p, err
	}
	if out != nil {
		if f, ok := out.Value.(float64); ok {
			p.readyGeneration = int64(f)
		}
	}
	if out, err = self.GetOutputDetails(GraphsOutput); err != nil {
		return p, err
	}
	if out != nil {
		graphs, _ := out.Value.([]any)
		for _, g := range graphs {
			m, _ := g.(map[string]any)
			name, _ := m["name"].(string)
			if f, ok := m["readyGeneration"].(float64); ok && name != "" {
				if p.readyGenerations == nil {
					p.readyGenerations = map[string]int64{}
				}
				p.readyGenerations[name] = int64(f)
			}
		}
	}
	return p, nil
}

// LoadConfig reads and validates every `minimax-m3:` key the stack sets. keys lists the stack's
// full keys; nil reads them from PULUMI_CONFIG, and without that only the known keys are read.
func LoadConfig(ctx *pulumi.Context, keys []string) (config.Config, config.Raw, error) {
	if keys == nil {
		keys = keysFromEnvironment()
	}
	for _, k := range config.Keys() {
		keys = append(keys, config.Key(k))
	}
	raw := config.Raw{Values: map[string]string{}, Secrets: map[string]bool{}}
	for _, full := range keys {
		k, ok := strings.CutPrefix(full, config.Namespace+":")
		if !ok {
			continue
		}
		if v, ok := ctx.GetConfig(full); ok {
			raw.Values[k] = v
			raw.Secrets[k] = ctx.IsConfigSecret(full)
		}
	}
	c, err := ParseConfig(raw)
	return c, raw, err
}

// ParseConfig builds and validates a Config from config values (as a stack or the package's inputs
// hold them), the flags extraArgs may not repeat included.
func ParseConfig(raw config.Raw) (config.Config, error) {
	c, err := config.Parse(raw)
	if err == nil {
		if ps := manifest.RepeatedFlags(&c); len(ps) > 0 {
			err = ps
		}
	}
	return c, err
}

// checkKubeconfig refuses a kubeconfig (minimax-m3:kubeconfig) that is not one, or that lacks the
// context kubernetes.context names, at its key, before anything is touched. Nothing of its content
// is in the message.
func checkKubeconfig(kubeconfig, kubeContext string) config.Problems {
	var ps config.Problems
	kc, err := clientcmd.Load([]byte(kubeconfig))
	switch {
	case err != nil:
		ps.Add(config.KubeconfigKey, "is not a kubeconfig (YAML with clusters, users and contexts): %s", firstLine(err.Error()))
	case len(kc.Contexts) == 0:
		ps.Add(config.KubeconfigKey, "is not a kubeconfig: it has no contexts")
	case kubeContext != "":
		if _, ok := kc.Contexts[kubeContext]; !ok {
			ps.Add("kubernetes.context", "%q is not a context of minimax-m3:kubeconfig (its contexts: %s)", kubeContext, strings.Join(slices.Sorted(maps.Keys(kc.Contexts)), ", "))
		}
	case kc.CurrentContext == "" || kc.Contexts[kc.CurrentContext] == nil:
		ps.Add(config.KubeconfigKey, "has no current context: set kubernetes.context to one of its contexts (%s)", strings.Join(slices.Sorted(maps.Keys(kc.Contexts)), ", "))
	}
	return ps
}

// firstLine is an error's first line, which a YAML decoder's errors keep free of the document.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// keysFromEnvironment lists the config keys the Pulumi CLI hands a program in PULUMI_CONFIG.
func keysFromEnvironment() []string {
	var cfg map[string]any
	if err := json.Unmarshal([]byte(os.Getenv(pulumi.EnvConfig)), &cfg); err != nil {
		return nil
	}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jobResults is the reader of the smoke test's result, when the cluster's reader can read it.
func jobResults(reader ObjectReader) JobResultReader {
	r, _ := reader.(JobResultReader)
	return r
}

// routeWeights sets the route's weights during a rollout, when the cluster's reader can.
func routeWeights(reader ObjectReader) RouteWeights {
	w, _ := reader.(RouteWeights)
	return w
}

// graphStatus follows the graph's status, when the cluster's reader can.
func graphStatus(reader ObjectReader) GraphStatusWatcher {
	w, _ := reader.(GraphStatusWatcher)
	return w
}

func optionalString(s string) pulumi.StringPtrInput {
	if s == "" {
		return nil
	}
	return pulumi.String(s)
}

// stackLog shows the pre-deploy checks' messages on the stack.
type stackLog struct{ ctx *pulumi.Context }

func (l stackLog) Warn(msg string) { _ = l.ctx.Log.Warn(msg, nil) }
func (l stackLog) Info(msg string) { _ = l.ctx.Log.Info(msg, nil) }
