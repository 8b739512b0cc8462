package components

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
	"minimax-m3/manifest"
)

// GraphAPIVersion is the DynamoGraphDeployment version the program writes.
//
// To move to a newer version (say nvidia.com/v1) once the operator serves it: change this constant
// and add the version it replaces to previousGraphAPIVersions. The alias makes the engine treat the
// graph in the stack's state as the same resource, so `up` updates it in place; without it the
// type token changes and the graph would be deleted and created again.
const GraphAPIVersion = "nvidia.com/v1beta1"

var previousGraphAPIVersions = []string{}

// GraphArgs describes the Dynamo graph of one stack.
type GraphArgs struct {
	// Meta carries the stack's identity and what it adopted into every object's annotations.
	Meta      StackMeta
	Namespace pulumi.StringInput
	Config    *config.Config
	// Decided is what the pre-deploy checks decided about the graph's objects (its clique, the
	// workers' RuntimeClass).
	Decided manifest.Decisions
	// LegacyName is the component's logical name under the first naming scheme.
	LegacyName string
	// Index is the graph's number from 0 (scaleOut.graphs): it names the component's children.
	Index int
	// ReadyBefore is the generation an earlier up saw the graph Ready at (0: none): when this up
	// leaves the graph at it, there is nothing to wait for (the provider too waits only for a
	// create or an update).
	ReadyBefore int64
	// Status, when the cluster can be read, lets the program wait for the graph's Ready itself
	// instead of the provider (followGraph): it names the failures of the graph's pods while it
	// waits and ends `up` on one that does not clear by itself. With nil the provider waits, and
	// nothing is reported until its timeout.
	Status GraphStatusWatcher
}

// Graph is the DynamoGraphDeployment and the ConfigMap its workers read the speculative config from.
type Graph struct {
	pulumi.ResourceState
	Name      pulumi.StringOutput `pulumi:"name"`
	ConfigMap pulumi.StringOutput `pulumi:"configMap"`
	// Object is the DynamoGraphDeployment.
	Object pulumi.Resource
	// Ready resolves to the DynamoGraphDeployment once it is Ready (at once in a preview, or with
	// readiness.waitForReady off): what needs a Ready graph depends on it with
	// pulumi.DependsOnInputs.
	Ready pulumi.ResourceArrayOutput
	// ReadyGeneration is the generation this up saw Ready (or wrote, when it does not wait).
	ReadyGeneration pulumi.IntOutput
	// SmokeTest is the graph's smoke test, nil when none runs.
	SmokeTest *SmokeTest
}

// NewGraph creates the ConfigMap and the DynamoGraphDeployment and, unless disabled, waits until
// the Dynamo operator reports the graph Ready for the generation `up` wrote.
func NewGraph(ctx *pulumi.Context, name string, args *GraphArgs, opts ...pulumi.ResourceOption) (*Graph, error) {
	g := &Graph{}
	opts = append(opts, legacyAlias(ctx, args.LegacyName, deploymentType, graphType))
	if err := ctx.RegisterComponentResource(graphType, name, g, opts...); err != nil {
		return nil, err
	}
	c := args.Config

	cm, err := corev1.NewConfigMap(ctx, graphChild(name, "speculative-config", args.Index), &corev1.ConfigMapArgs{
		Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(c.ConfigMapName()), Namespace: args.Namespace, Labels: stackLabels(ctx),
			Annotations: args.Meta.annotations(ctx, "ConfigMap", c.ConfigMapName(), nil)},
		Data: pulumi.ToStringMap(manifest.SpeculativeConfigs(c)),
	}, pulumi.Parent(g), legacyAlias(ctx, legacySuffixed(args.LegacyName, "-config"), deploymentType, graphType, "kubernetes:core/v1:ConfigMap"))
	if err != nil {
		return nil, err
	}

	if c.Benchmark.Enabled {
		// The AIPerf configuration every benchmark Job of the sweep reads (cmd/bench).
		perf, err := manifest.AIPerfConfig(c)
		if err != nil {
			return nil, err
		}
		if _, err := corev1.NewConfigMap(ctx, graphChild(name, "aiperf-config", args.Index), &corev1.ConfigMapArgs{
			Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(manifest.AIPerfConfigMapName(c)), Namespace: args.Namespace, Labels: stackLabels(ctx),
				Annotations: args.Meta.annotations(ctx, "ConfigMap", manifest.AIPerfConfigMapName(c), nil)},
			Data: pulumi.StringMap{manifest.AIPerfConfigKey: pulumi.String(perf)},
		}, pulumi.Parent(g)); err != nil {
			return nil, err
		}
	}

	gs, err := manifest.GraphSpec(c, args.Decided)
	if err != nil {
		return nil, err
	}
	labels := stackLabels(ctx)
	// The recipe's own labels.
	labels["app.kubernetes.io/name"] = pulumi.String(c.GraphName)
	labels[manifest.PartOfLabel] = pulumi.String("dynamo")
	if c.Benchmark.Enabled {
		labels[BenchmarkLabel] = pulumi.String("true")
	}

	var aliases []pulumi.Alias
	if args.LegacyName != "" {
		aliases = append(aliases, pulumi.Alias{URN: legacyURN(ctx, args.LegacyName, deploymentType, graphType, graphTypeToken("nvidia.com/v1beta1"))})
	}
	for _, v := range previousGraphAPIVersions {
		aliases = append(aliases, pulumi.Alias{Type: pulumi.String(graphTypeToken(v))})
	}
	var ignore []string
	for i, comp := range gs.Components {
		if comp.ScalingAdapter != nil {
			// The scaling adapter owns these replicas now.
			ignore = append(ignore, fmt.Sprintf("spec.components[%d].replicas", i))
		}
	}
	programWaits := args.Status != nil && c.Readiness.WaitForReady
	annotations, timeouts := readiness(c.Readiness, c.Restart.ID, c.RolloutWaves(), programWaits)
	digests := manifest.TemplateDigestsOf(gs)
	for k, v := range digests {
		annotations[k] = pulumi.String(v)
	}
	// The operator's component path, whose rollout annotations and pod templates this program
	// writes: Grove, which the operator picks for a new graph when its API is installed, would
	// ignore both. `up` reads the operator's choice back (cluster.OtherProvider).
	annotations[cluster.GroveOptOut] = pulumi.String("false")
	if key, clique := c.Placement.TopologyKey, args.Decided.CliqueOf(c); key != "" && clique != "" {
		annotations[manifest.PlacementAnnotation] = pulumi.String(key + "=" + clique)
	}
	warnSurgingRolls(ctx, c, args.Meta.LiveGraph(c.GraphName), digests)
	dgd, err := newObject(ctx, name, objectArgs{
		APIVersion: GraphAPIVersion, Kind: "DynamoGraphDeployment",
		Name: c.GraphName, Namespace: args.Namespace, Labels: labels,
		Annotations: args.Meta.annotations(ctx, "DynamoGraphDeployment", c.GraphName, annotations),
		Spec:        gs,
	},
		pulumi.Parent(g),
		pulumi.DependsOn([]pulumi.Resource{cm}),
		pulumi.Timeouts(timeouts),
		pulumi.Aliases(aliases),
		pulumi.IgnoreChanges(ignore),
		// A new graph name replaces the graph: delete the old one first, or the new one would need
		// a second set of GPUs to become Ready.
		pulumi.DeleteBeforeReplace(true),
	)
	if err != nil {
		return nil, err
	}
	switch {
	case ctx.DryRun():
		// Nothing waits in a preview, and the generation `up` will see Ready is not known: a saved
		// plan then takes the value the update finds.
		g.Ready = pulumi.ResourceArray{pulumi.NewResourceInput(dgd)}.ToResourceArrayOutput()
		g.ReadyGeneration = pulumi.UnsafeUnknownOutput([]pulumi.Resource{dgd}).ApplyT(func(any) int { return 0 }).(pulumi.IntOutput)
	case programWaits:
		create, update := readinessBudgets(c.Readiness, c.RolloutWaves())
		g.Ready, g.ReadyGeneration = followGraph(ctx, args.Status, g, dgd, &graphWait{
			namespace: c.Namespace.Name, name: c.GraphName, restartID: c.Restart.ID,
			timeout: c.Readiness.Timeout, create: create, update: update, readyBefore: args.ReadyBefore,
			progressDeadline: c.Readiness.ProgressDeadlineDuration(),
		})
	default:
		// The provider waits (or nothing does): the graph's registration is its Ready.
		g.Ready = pulumi.ResourceArray{pulumi.NewResourceInput(dgd)}.ToResourceArrayOutput()
		g.ReadyGeneration = dgd.Metadata.Generation().ApplyT(func(gen *int) int {
			if gen == nil {
				return 0
			}
			return *gen
		}).(pulumi.IntOutput)
	}
	if err := newNetworkPolicy(ctx, name, g, args); err != nil {
		return nil, err
	}
	if err := newDisruptionBudgets(ctx, name, g, args); err != nil {
		return nil, err
	}
	g.Object = dgd
	g.Name = pulumi.All(dgd.Metadata.Name().Elem(), g.Ready).ApplyT(func(v []any) string { return v[0].(string) }).(pulumi.StringOutput)
	g.ConfigMap = cm.Metadata.Name().Elem()
	return g, ctx.RegisterResourceOutputs(g, pulumi.Map{"name": g.Name, "configMap": g.ConfigMap, "readyGeneration": g.ReadyGeneration})
}

// serving resolves once the graph serves: Ready and, when it runs, past its smoke test.
func (g *Graph) serving() pulumi.ResourceArrayOutput {
	if g.SmokeTest != nil {
		return g.SmokeTest.Passed
	}
	return g.Ready
}

// servedOptions make a resource wait for the graph to serve: its Ready and its smoke test's Job.
func (g *Graph) servedOptions() []pulumi.ResourceOption {
	opts := []pulumi.ResourceOption{pulumi.DependsOnInputs(g.Ready)}
	if g.SmokeTest != nil {
		opts = append(opts, pulumi.DependsOn([]pulumi.Resource{g.SmokeTest.Job}))
	}
	return opts
}

func graphTypeToken(apiVersion string) string {
	return "kubernetes:" + apiVersion + ":DynamoGraphDeployment"
}

// readiness turns the readiness config into the provider's await annotation and timeouts: the
// provider waits (pulumi.com/waitFor) unless the program does (programWaits, followGraph) or
// nothing does (readiness.waitForReady off).
func readiness(r config.ReadinessConfig, restartID string, waves int, programWaits bool) (pulumi.StringMap, *pulumi.CustomTimeouts) {
	del, _ := time.ParseDuration(r.DeleteTimeout) // validated
	if !r.WaitForReady || programWaits {
		return pulumi.StringMap{"pulumi.com/skipAwait": pulumi.String("true")}, &pulumi.CustomTimeouts{Delete: fmt.Sprint(del)}
	}
	create, update := readinessBudgets(r, waves)
	return pulumi.StringMap{"pulumi.com/waitFor": pulumi.String(WaitFor(restartID))},
		&pulumi.CustomTimeouts{Create: fmt.Sprint(create), Update: fmt.Sprint(update), Delete: fmt.Sprint(del)}
}

// readinessBudgets is how long `up` waits for the graph's Ready. readiness.timeout bounds one round
// of pod starts: a create starts every pod at once; an update may replace them in waves rounds
// (config.RolloutWaves), and waits for each.
func readinessBudgets(r config.ReadinessConfig, waves int) (create, update time.Duration) {
	d, _ := time.ParseDuration(r.Timeout) // validated
	return d, d * time.Duration(max(waves, 1))
}

// WaitFor is the graph's pulumi.com/waitFor annotation. The operator sets Ready once every
// component's pods are ready. The provider waits for a Ready whose observedGeneration (the
// condition's, else status.observedGeneration) has reached the generation `up` wrote, so an update
// waits for the operator to roll the workers. With a restart ID it also waits, on the same
// observation of the graph, for the operator's restart status to have taken that ID and finished:
// Ready alone may still describe the pods before the restart. A restart finishes Completed, or
// Superseded when a worker change in the same update started a rollout that replaces every pod
// anyway (the operator's dgd_restart_reconciler.go); Ready at the generation then waits for that
// rollout. The provider evaluates the path as RFC 9535 JSONPath, whose filters select among the
// members of status.
func WaitFor(restartID string) string {
	if restartID == "" {
		return "condition=Ready"
	}
	all, _ := json.Marshal([]string{
		"condition=Ready",
		fmt.Sprintf("jsonpath={.status[?@.observedID=='%s' && (@.phase=='Completed' || @.phase=='Superseded')].observedID}=%s", restartID, restartID),
	})
	return string(all)
}
