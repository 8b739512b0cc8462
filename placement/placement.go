package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	schedulingcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// GPU is the extended resource the NVIDIA device plugin advertises; the table counts it.
const GPU corev1.ResourceName = "nvidia.com/gpu"

// Pool is what the cluster holds: its nodes, and the pods that hold their resources (any pod not
// finished; pods not yet bound to a node hold nothing).
type Pool struct {
	Nodes []corev1.Node
	Pods  []corev1.Pod
}

// Worker is one pod the graph needs in the domain: its pod spec as the scheduler filters it
// (node selector, required node affinity, tolerations; the containers' requests).
type Worker struct {
	// Role names the worker's kind in messages (Worker, PrefillWorker, DecodeWorker).
	Role string
	Spec corev1.PodSpec
}

// Request is a graph's placement: its workers, the node label whose value is a domain (the NVLink
// clique), and which of the pool's pods are the graph's own (their resources count as free for it:
// an update rolls them).
type Request struct {
	TopologyKey string
	Workers     []Worker
	Own         func(*corev1.Pod) bool
	// Previous is the domain the graph was placed in before (""): kept whenever it still holds
	// every worker, so that a change never moves a running graph.
	Previous string
	// Taken maps the domains other graphs of the same deployment hold to those graphs: each
	// graph has a domain of its own, so none of them is chosen.
	Taken map[string]string
}

// Domain is one value of the topology key among the nodes the workers may use.
type Domain struct {
	Name string
	// Trays are the domain's nodes the workers may use.
	Trays int
	// FreeGPUs are the GPUs of those nodes no other pod requests.
	FreeGPUs int64
	// Holds is how many of the graph's workers fit, placed as the scheduler would fit them.
	Holds int
	// TakenBy is the other graph that holds the domain (Request.Taken), "" when none does.
	TakenBy string
}

// Result is the pool as the graph sees it.
type Result struct {
	TopologyKey string
	Workers     int
	// Domains by name.
	Domains []Domain
	// Excluded counts the nodes no worker may use, by reason, for the table's footnote.
	Excluded map[string]int
	// Chosen is the domain the graph goes to; "" when none holds every worker.
	Chosen string
	// OutOfService are the nodes of each domain the workers could use but for their state: cordoned,
	// not Ready, or tainted against them. By domain, then name.
	OutOfService []Tray
}

// Tray is a node of a domain out of service for the workers, and why.
type Tray struct {
	Domain, Node string
	// State says why: "cordoned", "not Ready (Ready is Unknown: NodeStatusUnknown)", or "tainted
	// team-b/reserved:NoExecute".
	State string
}

// Trays are the domain's nodes out of service.
func (r Result) Trays(domain string) []Tray {
	var out []Tray
	for _, t := range r.OutOfService {
		if t.Domain == domain {
			out = append(out, t)
		}
	}
	return out
}

// Reasons a node is left out.
const (
	ExcludedCordoned   = "cordoned"
	ExcludedNotReady   = "not Ready"
	ExcludedNoKey      = "without the topology label"
	ExcludedNotMatched = "not selected, or without GPUs"
	ExcludedTainted    = "tainted against the workers"
	ExcludedTooSmall   = "too small for a worker"
)

// outOfServiceTaints are the taints Kubernetes itself puts on a node out of service (the node
// lifecycle controller's, for a cordoned, NotReady or unreachable node): the fit names the state,
// cordoned or not Ready, not the taint.
var outOfServiceTaints = []string{corev1.TaintNodeUnschedulable, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}

// Place fits the request's workers into each domain of the pool, as the scheduler's node filters
// (node selector and required affinity, taints, cordon, readiness, resources) would, and chooses a
// domain that holds them all: the previous one when it still does, else the one with the fewest
// free GPUs that does (the tightest fit leaves the largest room to others), by name on a tie.
// Without a topology key the whole pool is one domain, named "".
func Place(p Pool, r Request) Result {
	res := Result{TopologyKey: r.TopologyKey, Workers: len(r.Workers), Excluded: map[string]int{}}
	used := map[string]corev1.ResourceList{}
	for i := range p.Pods {
		pod := &p.Pods[i]
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if r.Own != nil && r.Own(pod) {
			continue
		}
		add(used, pod.Spec.NodeName, resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
	}

	domains := map[string][]*node{}
	for i := range p.Nodes {
		n := &p.Nodes[i]
		if !selectedByAny(n, r.Workers) {
			res.Excluded[ExcludedNotMatched]++
			continue
		}
		name, labelled := "", true
		if r.TopologyKey != "" {
			name = n.Labels[r.TopologyKey]
			labelled = name != ""
		}
		out := func(reason, state string) {
			res.Excluded[reason]++
			if labelled {
				res.OutOfService = append(res.OutOfService, Tray{Domain: name, Node: n.Name, State: state})
			}
		}
		// A node that could not hold a worker even empty (untainted, then as it is): a CPU or
		// system node of an unselective pool counts for nothing; a GPU node without a resource the
		// workers request (an RDMA device) is named.
		tooSmall := func() {
			if q, ok := n.Status.Allocatable[GPU]; ok && !q.IsZero() {
				res.Excluded[ExcludedTooSmall]++
			} else {
				res.Excluded[ExcludedNotMatched]++
			}
		}
		if !roomForAny(n, r.Workers) {
			tooSmall()
			continue
		}
		if taint, ok := untoleratedByAll(n, r.Workers); ok {
			out(ExcludedTainted, "tainted "+taint)
			continue
		}
		if !holdsAny(n, r.Workers) {
			tooSmall()
			continue
		}
		switch {
		case n.Spec.Unschedulable:
			out(ExcludedCordoned, "cordoned")
			continue
		case !ready(n):
			out(ExcludedNotReady, "not Ready ("+readiness(n)+")")
			continue
		case !labelled:
			res.Excluded[ExcludedNoKey]++
			continue
		}
		free := n.Status.Allocatable.DeepCopy()
		for k, q := range used[n.Name] {
			f := free[k]
			f.Sub(q)
			free[k] = f
		}
		domains[name] = append(domains[name], &node{Node: n, free: free})
	}

	for name, nodes := range domains {
		d := Domain{Name: name, Trays: len(nodes), TakenBy: r.Taken[name]}
		for _, n := range nodes {
			if q, ok := n.free[GPU]; ok && q.Sign() > 0 {
				d.FreeGPUs += q.Value()
			}
		}
		d.Holds = fit(nodes, r.Workers)
		res.Domains = append(res.Domains, d)
	}
	slices.SortFunc(res.Domains, func(a, b Domain) int { return strings.Compare(a.Name, b.Name) })

	var candidates []Domain
	for _, d := range res.Domains {
		if d.Holds < len(r.Workers) || d.TakenBy != "" {
			continue
		}
		if d.Name == r.Previous && r.Previous != "" {
			res.Chosen = d.Name
			return res
		}
		candidates = append(candidates, d)
	}
	if len(candidates) > 0 && (r.Previous == "" || r.TopologyKey == "") {
		best := slices.MinFunc(candidates, func(a, b Domain) int {
			return cmp.Or(cmp.Compare(a.FreeGPUs, b.FreeGPUs), strings.Compare(a.Name, b.Name))
		})
		res.Chosen = best.Name
		if r.TopologyKey == "" {
			res.Chosen = ""
		}
	}
	return res
}

// Fits reports whether some domain holds every worker (Chosen is then the one to use; with no
// topology key, Chosen is "" and the pool holds them).
func (r Result) Fits() bool {
	for _, d := range r.Domains {
		if d.Name == r.Chosen && d.Holds >= r.Workers {
			return true
		}
	}
	return false
}

// Holding names the domains that hold a graph of n workers: those with room for it, and those
// another graph holds (Request.Taken).
func (r Result) Holding(n int) []string {
	var out []string
	for _, d := range r.Domains {
		if d.Holds >= n || d.TakenBy != "" {
			out = append(out, d.Name)
		}
	}
	return out
}

// Empty reports a pool with no node the workers may use at all, in any state: nothing to choose
// from (a node pool scaled to zero, or no GPU nodes).
func (r Result) Empty() bool {
	return len(r.Domains) == 0 && r.Excluded[ExcludedCordoned]+r.Excluded[ExcludedNotReady]+r.Excluded[ExcludedTainted]+r.Excluded[ExcludedNoKey]+r.Excluded[ExcludedTooSmall] == 0
}

// Domain is the named domain's row, and whether the pool has it.
func (r Result) Domain(name string) (Domain, bool) {
	i := slices.IndexFunc(r.Domains, func(d Domain) bool { return d.Name == name })
	if i < 0 {
		return Domain{}, false
	}
	return r.Domains[i], true
}

// Table is the pool as a table of domains, their trays, free GPUs and the workers each holds, with
// the nodes left out below it.
func (r Result) Table() string {
	var b strings.Builder
	header := "CLIQUE (" + r.TopologyKey + ")"
	if r.TopologyKey == "" {
		header = "POOL"
	}
	width := len(header)
	for _, d := range r.Domains {
		width = max(width, len(d.Name))
	}
	fmt.Fprintf(&b, "  %-*s  %5s  %9s  %s\n", width, header, "TRAYS", "FREE GPUS", "HOLDS")
	for _, d := range r.Domains {
		name := d.Name
		if name == "" {
			name = "(all nodes)"
		}
		taken := ""
		if d.TakenBy != "" {
			taken = "  (graph " + d.TakenBy + "'s)"
		}
		fmt.Fprintf(&b, "  %-*s  %5d  %9d  %d of %d workers%s\n", width, name, d.Trays, d.FreeGPUs, d.Holds, r.Workers, taken)
	}
	if len(r.Domains) == 0 {
		fmt.Fprintf(&b, "  (no node the workers may use)\n")
	}
	var left []string
	for _, reason := range []string{ExcludedCordoned, ExcludedNotReady, ExcludedTainted, ExcludedNoKey, ExcludedTooSmall} {
		if n := r.Excluded[reason]; n > 0 {
			what := reason
			if reason == ExcludedNoKey {
				what = "without the label " + r.TopologyKey
			}
			left = append(left, fmt.Sprintf("%d %s", n, what))
		}
	}
	if len(left) > 0 {
		fmt.Fprintf(&b, "  not counted: %s\n", strings.Join(left, ", "))
	}
	return b.String()
}

type node struct {
	*corev1.Node
	free corev1.ResourceList
}

// fit places workers, the largest first, each on the first node (by name) that passes its filters
// and has room, and returns how many are placed.
func fit(nodes []*node, workers []Worker) int {
	slices.SortFunc(nodes, func(a, b *node) int { return strings.Compare(a.Name, b.Name) })
	type demand struct {
		w    *Worker
		reqs corev1.ResourceList
	}
	ds := make([]demand, len(workers))
	for i := range workers {
		pod := &corev1.Pod{Spec: workers[i].Spec}
		ds[i] = demand{&workers[i], resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})}
	}
	slices.SortStableFunc(ds, func(a, b demand) int {
		ga, gb := a.reqs[GPU], b.reqs[GPU]
		return gb.Cmp(ga)
	})
	free := make([]corev1.ResourceList, len(nodes))
	for i, n := range nodes {
		free[i] = n.free.DeepCopy()
	}
	placed := 0
	for _, d := range ds {
		for i, n := range nodes {
			if !usable(n.Node, d.w) || !room(free[i], d.reqs) {
				continue
			}
			for k, q := range d.reqs {
				f := free[i][k]
				f.Sub(q)
				free[i][k] = f
			}
			placed++
			break
		}
	}
	return placed
}

func room(free, reqs corev1.ResourceList) bool {
	for k, q := range reqs {
		if q.IsZero() {
			continue
		}
		f, ok := free[k]
		if !ok || f.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// roomForAny reports whether the node, empty, has room for a worker that selects it, its taints
// aside.
func roomForAny(n *corev1.Node, workers []Worker) bool {
	return slices.ContainsFunc(workers, func(w Worker) bool {
		return selected(n, &w) && room(n.Status.Allocatable, resourcehelper.PodRequests(&corev1.Pod{Spec: w.Spec}, resourcehelper.PodResourcesOptions{}))
	})
}

// holdsAny reports whether the node, empty, could hold one of the workers it may run.
func holdsAny(n *corev1.Node, workers []Worker) bool {
	return slices.ContainsFunc(workers, func(w Worker) bool {
		return usable(n, &w) && room(n.Status.Allocatable, resourcehelper.PodRequests(&corev1.Pod{Spec: w.Spec}, resourcehelper.PodResourcesOptions{}))
	})
}

// selectedByAny reports whether a worker's node selector and required affinity select the node.
func selectedByAny(n *corev1.Node, workers []Worker) bool {
	return slices.ContainsFunc(workers, func(w Worker) bool { return selected(n, &w) })
}

func selected(n *corev1.Node, w *Worker) bool {
	ok, err := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: w.Spec}).Match(n)
	return err == nil && ok
}

// untoleratedByAll is a taint (key=value:effect) that keeps every worker the node selects off it,
// if there is one; Kubernetes' own out-of-service taints aside (the node's state says those).
func untoleratedByAll(n *corev1.Node, workers []Worker) (string, bool) {
	var first string
	for i := range workers {
		if !selected(n, &workers[i]) {
			continue
		}
		t, ok := untolerated(n, &workers[i])
		if !ok {
			return "", false
		}
		if first == "" {
			first = taintString(t)
		}
	}
	return first, first != ""
}

// usable is the scheduler's node affinity and taint filters for one worker (the out-of-service
// taints aside: a cordoned or NotReady node is not in any domain).
func usable(n *corev1.Node, w *Worker) bool {
	if !selected(n, w) {
		return false
	}
	_, bad := untolerated(n, w)
	return !bad
}

func untolerated(n *corev1.Node, w *Worker) (corev1.Taint, bool) {
	pod := &corev1.Pod{Spec: w.Spec}
	return schedulingcorev1.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, tolerations(pod), func(t *corev1.Taint) bool {
		return (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && !slices.Contains(outOfServiceTaints, t.Key)
	}, false)
}

// taintString is a taint as kubectl writes it: key=value:effect.
func taintString(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// tolerations are the worker's own and, for each extended resource it requests (nvidia.com/gpu),
// the one the ExtendedResourceToleration admission plugin adds, as GPU node pools that taint their
// nodes by that name expect (the recipe's workers rely on it). On a cluster without the plugin such
// a worker stays Pending, and `up` names the taint the scheduler reports.
func tolerations(pod *corev1.Pod) []corev1.Toleration {
	out := slices.Clone(pod.Spec.Tolerations)
	for name := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		if strings.Contains(string(name), "/") && !strings.Contains(string(name), "kubernetes.io/") {
			out = append(out, corev1.Toleration{Key: string(name), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return out
}

// readiness is the node's Ready condition as a phrase: "Ready is Unknown: NodeStatusUnknown".
func readiness(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return strings.TrimSpace(fmt.Sprintf("Ready is %s: %s", c.Status, c.Reason))
		}
	}
	return "no Ready condition"
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func add(m map[string]corev1.ResourceList, node string, l corev1.ResourceList) {
	if m[node] == nil {
		m[node] = corev1.ResourceList{}
	}
	for k, q := range l {
		sum := m[node][k]
		if sum.Format == "" {
			sum = resource.Quantity{Format: q.Format}
		}
		sum.Add(q)
		m[node][k] = sum
	}
}
