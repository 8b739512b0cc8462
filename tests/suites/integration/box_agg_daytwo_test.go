package integration

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"minimax-m3/automation"
	"minimax-m3/benchmark"
	"minimax-m3/components"
	"minimax-m3/manifest"
	"minimax-m3/tests/framework/rackbox"
)

// One agg stack on a rack of its own, brought to Ready once, through the day-two changes that each
// change one thing on a Ready stack, in order; each step is a subtest, and a step that fails stops
// the ones after it (they would run on a state it did not leave). Before the first up, restart.id
// is refused: the CRD forbids spec.restart on a graph's create.
//
// The steps run in this order because each asserts what its change alone does: the draft revision
// before benchmark.enabled (its preview's operations are exact), the stack rename last (it asserts
// the original stack's identity, and leaves the stack renamed).
func TestBoxOneAggStackThroughDayTwoChanges(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	s := newBoxStack(t, "agg", "box-day-two", addRack(t, rackbox.NVL72("day-two").WithGPUs(12)), auto.ConfigMap{"minimax-m3:restart.id": {Value: "first"}})
	// Whatever the stack is called when the test ends (the last step renames it), it is destroyed.
	t.Cleanup(func() { _, _ = s.stack.Destroy(context.Background()) })
	_, err := s.preview(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error()+s.log.String(), "minimax-m3:restart.id: DynamoGraphDeployment "+s.ns+"/"+aggGraph+" does not exist yet")

	require.NoError(t, s.stack.RemoveConfig(ctx, "minimax-m3:restart"))
	upOK(t, s)

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a draft revision change downloads again and rolls the workers", func(t *testing.T) {
			// In the rack box: a new draft revision downloads again and rolls the workers through the real
			// operator.
			before := boxGraph(t, s.ns, aggGraph)
			workers := client.MatchingLabels{graphLabelKey: aggGraph, "nvidia.com/dynamo-component": "Worker"}
			podsBefore := podsOf(t, s.ns, workers)

			s.set(ctx, "minimax-m3:model.draft.revision", "0123456789abcdef0123456789abcdef01234567")
			ops, err := s.preview(ctx)
			require.NoError(t, err, s.log.String())
			// The download fetches the new draft first (its Job is replaced); the ConfigMap is updated in
			// place, and the workers' pod template changes with the config they read.
			want := map[string]string{
				"kubernetes:batch/v1:Job model-download":                    "delete-replaced replace create-replacement",
				"kubernetes:core/v1:ConfigMap speculative-config":           "update",
				"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph": "update",
			}
			assert.Equal(t, want, graphOps(t, ops))
			assert.Equal(t, want, graphOps(t, upOK(t, s)))
			after := boxGraph(t, s.ns, aggGraph)
			assert.Greater(t, after.GetGeneration(), before.GetGeneration(), "a new generation: the operator rolls the workers")
			w := liveGraphSpecOn(t, box.Client, s.ns, aggGraph).Components[1]
			assert.Len(t, w.PodTemplate.Annotations[manifest.SpeculativeConfigChecksum], 64)
			podsAfter := podsOf(t, s.ns, workers)
			require.Len(t, podsAfter, 3)
			for _, p := range podsAfter {
				assert.NotEqual(t, podsBefore[0].Labels["pod-template-hash"], p.Labels["pod-template-hash"], "worker %s rolled", p.Name)
			}
		}},
		{"restart.id restarts the existing graph, one component at a time", func(t *testing.T) {
			// spec.restart: refused on a graph that does not exist yet (the CRD forbids it on create), an
			// update of the graph alone once it does; the real operator restarts the components one at a time
			// in restart.order (each Deployment rolled by the real Deployment controller, its new pods placed
			// by the scheduler), and `up` returns once it has completed the restart.
			s.set(ctx, "minimax-m3:restart.id", "2026-12-02T18:00")
			s.set(ctx, "minimax-m3:restart.order[0]", "Worker")
			s.set(ctx, "minimax-m3:restart.order[1]", "Frontend")
			progress := watchRestart(t, s.ns, aggGraph)
			ops := upOK(t, s)
			assert.Equal(t, [][]string{{"Worker"}, {"Frontend"}}, progress(), "the operator restarts one component at a time, in restart.order")
			assert.Equal(t, map[string]string{"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment graph": "update"}, graphOps(t, ops))
			g := boxGraph(t, s.ns, aggGraph)
			id, _, _ := unstructured.NestedString(g.Object, "spec", "restart", "id")
			assert.Equal(t, "2026-12-02T18:00", id, "the CRD accepts spec.restart on an update")
			// `up` returned only once the operator had completed the restart with this ID.
			observed, _, _ := unstructured.NestedString(g.Object, "status", "restart", "observedID")
			phase, _, _ := unstructured.NestedString(g.Object, "status", "restart", "phase")
			assert.Equal(t, []string{"2026-12-02T18:00", "Completed"}, []string{observed, phase})
		}},
		{"the benchmark's restart deletes every pod at once", func(t *testing.T) {
			// The benchmark's restart between points, the recipe's way (`kubectl delete pods -l
			// nvidia.com/dynamo-graph-deployment-name=<graph>`), on a full rack: every pod of the graph is
			// deleted at once and its ReplicaSet starts every replacement together, with no new pod template
			// (no rollout, no spare GPU, one round of cold starts); the restart returns once as many pods are
			// Ready again and the operator reports the graph Ready.
			ns := s.ns
			s.set(ctx, "minimax-m3:benchmark.enabled", "true")
			upOK(t, s)
			c, err := s.stack.Config(ctx)
			require.NoError(t, err)
			graphPods := client.MatchingLabels{graphLabelKey: aggGraph}
			before := map[string]string{}
			for _, p := range podsOf(t, ns, graphPods) {
				before[string(p.UID)] = p.Labels["pod-template-hash"]
			}
			require.Len(t, before, 4, "the frontend and three workers")
			generation := boxGraph(t, ns, aggGraph).GetGeneration()

			kube, err := kubernetes.NewForConfig(box.Config)
			require.NoError(t, err)
			dyn, err := dynamic.NewForConfig(box.Config)
			require.NoError(t, err)
			sweep := &benchmark.Sweep{Config: &c, Namespace: ns, Kube: kube, Dynamic: dyn}
			var beats []string
			require.NoError(t, sweep.RestartPods(ctx, func(m string) { beats = append(beats, m) }))
			assert.Equal(t, []string{"deleted the graph's 4 pods; waiting for their replacements to be Ready"}, beats)

			after := podsOf(t, ns, graphPods)
			require.Len(t, after, 4)
			hashes := slices.Collect(maps.Values(before))
			for _, p := range after {
				assert.NotContains(t, before, string(p.UID), "every pod replaced")
				assert.Contains(t, hashes, p.Labels["pod-template-hash"], "by its own ReplicaSet: no rollout")
				assert.True(t, podCondition(&p, corev1.PodReady) != nil && podCondition(&p, corev1.PodReady).Status == corev1.ConditionTrue, p.Name)
			}
			g := boxGraph(t, ns, aggGraph)
			assert.Equal(t, generation, g.GetGeneration(), "the graph's spec untouched")
			assert.True(t, operatorReady(g))
		}},
		{"observability adds monitors of the live pods and changes nothing else", func(t *testing.T) {
			// prometheus-operator's CRDs are in the box (no operator of theirs runs): turning
			// observability on creates the two PodMonitors, the rule and the dashboard under the graph's
			// component and leaves the graph alone; the monitors select the graph's live pods, on ports
			// those pods have; the IMEX alert watches the DaemonSet the real compute-domain-controller made
			// for the stack's ComputeDomain. Turning it off deletes exactly those.
			ns := s.ns
			generation := boxGraph(t, ns, aggGraph).GetGeneration()
			s.set(ctx, "minimax-m3:observability.enabled", "true")
			s.set(ctx, "minimax-m3:observability.labels.release", "kube-prometheus-stack")
			added := map[string]string{
				"minimax-m3:index:Monitoring monitoring":                                     "create",
				"kubernetes:monitoring.coreos.com/v1:PodMonitor " + aggGraph + "-frontend":   "create",
				"kubernetes:monitoring.coreos.com/v1:PodMonitor " + aggGraph + "-workers":    "create",
				"kubernetes:monitoring.coreos.com/v1:PrometheusRule " + aggGraph + "-alerts": "create",
				"kubernetes:core/v1:ConfigMap dashboard":                                     "create",
			}
			ops, err := s.preview(ctx)
			require.NoError(t, err, s.log.String())
			assert.Equal(t, added, graphOps(t, ops))
			assert.Equal(t, added, graphOps(t, upOK(t, s)))
			assert.Equal(t, generation, boxGraph(t, ns, aggGraph).GetGeneration(), "the graph untouched")

			dyn, err := dynamic.NewForConfig(box.Config)
			require.NoError(t, err)
			for monitor, want := range map[string]struct {
				pods int
				port string
			}{aggGraph + "-frontend": {1, "http"}, aggGraph + "-workers": {3, "system"}} {
				live, err := dyn.Resource(manifest.PodMonitors).Namespace(ns).Get(ctx, monitor, metav1.GetOptions{})
				require.NoError(t, err, monitor)
				assert.Equal(t, "kube-prometheus-stack", live.GetLabels()["release"], monitor)
				var spec monitoringv1.PodMonitorSpec
				require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object["spec"].(map[string]any), &spec))
				selector, err := metav1.LabelSelectorAsSelector(&spec.Selector)
				require.NoError(t, err)
				var pods corev1.PodList
				require.NoError(t, box.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: selector}))
				assert.Len(t, pods.Items, want.pods, "%s selects the graph's live pods, as the operator labels them", monitor)
				for _, p := range pods.Items {
					var ports []string
					for _, c := range p.Spec.Containers {
						for _, cp := range c.Ports {
							ports = append(ports, cp.Name)
						}
					}
					assert.Contains(t, ports, *spec.PodMetricsEndpoints[0].Port, "%s: pod %s has the port it scrapes", monitor, p.Name)
				}
			}
			rule, err := dyn.Resource(manifest.PrometheusRules).Namespace(ns).Get(ctx, aggGraph+"-alerts", metav1.GetOptions{})
			require.NoError(t, err)
			var spec monitoringv1.PrometheusRuleSpec
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(rule.Object["spec"].(map[string]any), &spec))
			var imex string
			for _, r := range spec.Groups[0].Rules {
				if r.Alert == components.AlertIMEXDaemonsNotReady {
					imex = r.Expr.StrVal
				}
			}
			m := regexp.MustCompile(`daemonset="([^"]+)"`).FindStringSubmatch(imex)
			require.Len(t, m, 2, imex)
			var ds appsv1.DaemonSet
			require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: "nvidia-dra-driver-gpu", Name: m[1]}, &ds),
				"the IMEX alert watches the DaemonSet the compute-domain-controller made for the stack's ComputeDomain")

			require.NoError(t, s.stack.RemoveConfig(ctx, "minimax-m3:observability"))
			removed := map[string]string{}
			for k := range added {
				removed[k] = "delete"
			}
			assert.Equal(t, removed, graphOps(t, upOK(t, s)))
			_, err = dyn.Resource(manifest.PodMonitors).Namespace(ns).Get(ctx, aggGraph+"-frontend", metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "deleted with observability off: %v", err)
			assert.Equal(t, generation, boxGraph(t, ns, aggGraph).GetGeneration(), "the graph untouched")
		}},
		{"exposure routes the site's Gateway to the frontend, on a hostname no one else routes", func(t *testing.T) {
			// Gateway API's CRDs are in the box, and the site's Gateway an object of its own namespace (no
			// Gateway controller runs: no traffic flows). Another team's route already holds one hostname on
			// that Gateway: a stack asking for it is refused before anything changes; on a hostname of its
			// own the route is created under the graph's component, as rendered, to the Service the real
			// operator made for the frontend, and the outputs name the external URL. Off deletes it.
			ns := s.ns
			generation := boxGraph(t, ns, aggGraph).GetGeneration()
			dyn, err := dynamic.NewForConfig(box.Config)
			require.NoError(t, err)
			for _, obj := range []*unstructured.Unstructured{
				{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "box-gateways"}}},
				{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "box-team-b"}}},
				{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": map[string]any{"name": "shared", "namespace": "box-gateways"},
					"spec": map[string]any{"gatewayClassName": "site", "listeners": []any{map[string]any{"name": "https", "protocol": "HTTP", "port": int64(80)}}}}},
				{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": map[string]any{"name": "their-model", "namespace": "box-team-b"},
					"spec": map[string]any{"parentRefs": []any{map[string]any{"name": "shared", "namespace": "box-gateways"}}, "hostnames": []any{"taken.box.example"},
						"rules": []any{map[string]any{"backendRefs": []any{map[string]any{"name": "their-frontend", "port": int64(8000)}}}}}}},
			} {
				require.NoError(t, box.Client.Create(ctx, obj), obj.GetKind())
				if obj.GetKind() == "Namespace" {
					t.Cleanup(func() { _ = box.Client.Delete(context.Background(), obj) })
				}
			}
			s.set(ctx, "minimax-m3:exposure.enabled", "true")
			s.set(ctx, "minimax-m3:exposure.gateway.namespace", "box-gateways")
			s.set(ctx, "minimax-m3:exposure.gateway.name", "shared")
			s.set(ctx, "minimax-m3:exposure.gateway.sectionName", "https")
			s.set(ctx, "minimax-m3:exposure.hostname", "taken.box.example")
			_, err = s.preview(ctx)
			require.Error(t, err)
			assert.Contains(t, s.log.String(), `minimax-m3:exposure.hostname: "taken.box.example" is already routed on Gateway box-gateways/shared by HTTPRoute box-team-b/their-model (not a stack's; its hostnames: taken.box.example)`)

			s.set(ctx, "minimax-m3:exposure.hostname", "m3.box.example")
			// The Gateway's listener takes routes from its own namespace only (Gateway API's
			// default): preview says so, naming both keys, before anything is created; its owner
			// then admits every namespace.
			_, err = s.preview(ctx)
			require.Error(t, err)
			assert.Contains(t, s.log.String(), "minimax-m3:exposure.gateway.sectionName: Gateway box-gateways/shared takes no HTTPRoute from namespace.name "+ns+
				": listener https admits routes from its own namespace only (allowedRoutes.namespaces.from: Same)")
			gw := &unstructured.Unstructured{}
			gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
			require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: "box-gateways", Name: "shared"}, gw))
			require.NoError(t, unstructured.SetNestedSlice(gw.Object, []any{map[string]any{"name": "https", "protocol": "HTTP", "port": int64(80),
				"allowedRoutes": map[string]any{"namespaces": map[string]any{"from": "All"}}}}, "spec", "listeners"))
			require.NoError(t, box.Client.Update(ctx, gw))
			added := map[string]string{
				"minimax-m3:index:Exposure exposure":                            "create",
				"kubernetes:gateway.networking.k8s.io/v1:HTTPRoute " + aggGraph: "create",
			}
			// The graph's NetworkPolicy now admits the Gateway's namespace on the frontend's port.
			isolation := "kubernetes:networking.k8s.io/v1:NetworkPolicy network-policy"
			res, ops, err := s.up(ctx)
			require.NoError(t, err, s.log.String())
			assert.Equal(t, withOp(added, isolation, "update"), graphOps(t, ops))
			assert.Equal(t, "https://m3.box.example", res.Outputs["externalUrl"].Value)
			assert.Equal(t, generation, boxGraph(t, ns, aggGraph).GetGeneration(), "the graph untouched")

			live, err := dyn.Resource(manifest.HTTPRoutes).Namespace(ns).Get(ctx, aggGraph, metav1.GetOptions{})
			require.NoError(t, err)
			var spec gatewayv1.HTTPRouteSpec
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object["spec"].(map[string]any), &spec))
			c, err := s.stack.Config(ctx)
			require.NoError(t, err)
			want := components.Route(&c)
			assert.Equal(t, want.Hostnames, spec.Hostnames)
			assert.Equal(t, want.Rules[0].BackendRefs[0].Name, spec.Rules[0].BackendRefs[0].Name)
			assert.Equal(t, want.Rules[0].Timeouts, spec.Rules[0].Timeouts)
			var svc corev1.Service
			require.NoError(t, box.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: string(spec.Rules[0].BackendRefs[0].Name)}, &svc),
				"the route's backend is the Service the operator made for the frontend")
			assert.Equal(t, *spec.Rules[0].BackendRefs[0].Port, svc.Spec.Ports[0].Port)

			require.NoError(t, s.stack.RemoveConfig(ctx, "minimax-m3:exposure"))
			removed := map[string]string{}
			for k := range added {
				removed[k] = "delete"
			}
			assert.Equal(t, withOp(removed, isolation, "update"), graphOps(t, upOK(t, s)), "and no longer admits it")
			_, err = dyn.Resource(manifest.HTTPRoutes).Namespace("box-team-b").Get(ctx, "their-model", metav1.GetOptions{})
			assert.NoError(t, err, "the other team's route is theirs, untouched")
		}},
		{"a renamed stack keeps its objects", func(t *testing.T) {
			// `pulumi stack rename` keeps the stack's state and outputs; the objects carry the old name's
			// identity. The next update reads the identity its last update exported, knows the objects as its
			// own, and moves them to the new identity with a metadata-only update: no new graph generation, no
			// worker restarted.
			ns := s.ns
			var err error
			before := boxGraph(t, ns, aggGraph)
			assert.Equal(t, "organization/minimax-m3/agg", before.GetAnnotations()["minimax-m3.io/stack"])
			workers := client.MatchingLabels{graphLabelKey: aggGraph, "nvidia.com/dynamo-component": "Worker"}
			var uids []string
			for _, p := range podsOf(t, ns, workers) {
				uids = append(uids, string(p.UID))
			}

			out, err := s.cli("stack", "rename", "agg-renamed")
			require.NoError(t, err, out)
			s.name = "agg-renamed"
			s.stack, err = automation.SelectStack(ctx, automation.Options{ProjectDir: s.dir, Stack: s.name, EnvVars: s.env})
			require.NoError(t, err)
			_, _, err = s.up(ctx)
			require.NoError(t, err, "the renamed stack still owns its objects\n%s", s.log.String())
			after := boxGraph(t, ns, aggGraph)
			assert.Equal(t, "organization/minimax-m3/agg-renamed", after.GetAnnotations()["minimax-m3.io/stack"])
			assert.Equal(t, before.GetGeneration(), after.GetGeneration(), "metadata only")
			var now []string
			for _, p := range podsOf(t, ns, workers) {
				now = append(now, string(p.UID))
			}
			assert.ElementsMatch(t, uids, now, "no worker restarted")
			// The rename's update patched only metadata, and the provider may record an object's copy from
			// before its patch (see the adoption test): the smoke test's completed Job shows its old
			// labels to the next unrefreshed preview once.
			// One more up records the live objects, with nothing restarted.
			_, _, err = s.up(ctx)
			require.NoError(t, err, s.log.String())
			_, err = s.preview(ctx, optpreview.ExpectNoChanges(), optpreview.Diff())
			require.NoError(t, err, s.log.String())
		}},
	}
	parent := s.t
	defer func() { s.t = parent }()
	for _, step := range steps {
		if !t.Run(step.name, func(t *testing.T) {
			s.t = t // the stack's helpers fail the step, not the test from the step's goroutine
			step.run(t)
		}) {
			return
		}
	}
}

// withOp is ops with one more resource's operation.
func withOp(ops map[string]string, resource, op string) map[string]string {
	out := maps.Clone(ops)
	out[resource] = op
	return out
}
