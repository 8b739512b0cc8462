package components

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// RouteWeights sets the route's weights during an update of running graphs, graph by graph
// (internal/cluster.Reader does it by server-side apply under its own field manager).
type RouteWeights interface {
	// RouteWeight is the weight of the route's backend of that name, and whether it has one.
	RouteWeight(ctx context.Context, namespace, route, backend string) (int64, bool, error)
	SetRouteWeight(ctx context.Context, namespace, route, backend string, weight int64) error
	// ReleaseRoute gives the fields SetRouteWeight took back to the route's owner.
	ReleaseRoute(ctx context.Context, namespace, route string) error
}

// graphRollout takes the graphs of a stack of several out of its route one at a time while a
// change rolls their pods: before graph n's change its weight goes to 0 and its streams get
// scaleOut.drain to finish; once it is Ready again and has passed its smoke test its weight goes
// back to 1, and only then does graph n+1 drain. A change that fails leaves its graph at 0 (the
// others serve the route); the next up sets it back once the graph serves again.
type graphRollout struct {
	ctx    *pulumi.Context
	routes RouteWeights
	c      *config.Config
	// done resolves once the graph before is back in the route (or needed nothing).
	done pulumi.ResourceArrayOutput
	// restored are what each graph's return to the route waits for, for the route's own update.
	restored []pulumi.ResourceArrayInput
}

func newGraphRollout(ctx *pulumi.Context, routes RouteWeights, c *config.Config) *graphRollout {
	if routes == nil || !c.ScaledOut() || !c.Exposure.Enabled {
		return nil
	}
	return &graphRollout{ctx: ctx, routes: routes, c: c, done: pulumi.ResourceArray{}.ToResourceArrayOutput()}
}

// rolls names the components whose pod templates the update changes on a live graph (live: its
// annotations), nil when none does or the graph is new.
func rolls(live map[string]string, gc *config.Config, decided manifest.Decisions) []string {
	if live == nil {
		return nil
	}
	planned, err := manifest.TemplateDigests(gc, decided)
	if err != nil {
		return []string{"every component"}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(planned)) {
		if live[k] != planned[k] {
			out = append(out, strings.TrimPrefix(k, manifest.TemplateAnnotationPrefix))
		}
	}
	return out
}

// drain is what the change of graph gc, running (live) or new, waits for: for a running graph,
// the graph before it back in the route and, when the change rolls pods (rolled), the graph out
// of the route for scaleOut.drain. A new graph waits for none: it is not in the route yet. A
// preview says what each graph's change will do.
func (r *graphRollout) drain(gc *config.Config, live bool, rolled []string) pulumi.ResourceArrayOutput {
	if r == nil || !live {
		return pulumi.ResourceArray{}.ToResourceArrayOutput()
	}
	if len(rolled) == 0 {
		return r.done
	}
	backend, route, ns := string(RouteBackend(gc).Name), r.c.RouteName(), r.c.Namespace.Name
	drain := r.c.ScaleOut.DrainDuration()
	if r.ctx.DryRun() {
		// The plan, graph by graph; nothing waits in a preview.
		_ = r.ctx.Log.Info(fmt.Sprintf("rollout: graph %s: weight 0 in HTTPRoute %s/%s, %s for its streams (scaleOut.drain), the change (rolls %s), Ready, "+
			"its smoke test, weight 1; then the next graph", gc.GraphName, ns, route, drain, strings.Join(rolled, ", ")), nil)
		return pulumi.ResourceArray{}.ToResourceArrayOutput()
	}
	return r.done.ApplyTWithContext(r.ctx.Context(), func(ctx context.Context, after []pulumi.Resource) ([]pulumi.Resource, error) {
		if err := r.routes.SetRouteWeight(ctx, ns, route, backend, 0); err != nil {
			return nil, r.fail(fmt.Errorf("graph %s: taking it out of HTTPRoute %s/%s before its change: %w", gc.GraphName, ns, route, err))
		}
		_ = r.ctx.Log.Info(fmt.Sprintf("rollout: graph %s has weight 0 in HTTPRoute %s/%s; its streams get %s to finish (scaleOut.drain) before the change rolls %s",
			gc.GraphName, ns, route, drain, strings.Join(rolled, ", ")), nil)
		select {
		case <-time.After(drain):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return after, nil
	}).(pulumi.ResourceArrayOutput)
}

// restore puts running graph gc back in the route once it serves (serving: its Ready and its
// smoke test), when it is out of it; the next graph's drain waits for it. A new graph joins the
// route through the route's own update.
func (r *graphRollout) restore(gc *config.Config, live bool, serving pulumi.ResourceArrayOutput) {
	if r == nil || !live || r.ctx.DryRun() {
		return
	}
	backend, route, ns := string(RouteBackend(gc).Name), r.c.RouteName(), r.c.Namespace.Name
	done := pulumi.All(r.done, serving).ApplyTWithContext(r.ctx.Context(), func(ctx context.Context, v []any) ([]pulumi.Resource, error) {
		after := v[1].([]pulumi.Resource)
		w, found, err := r.routes.RouteWeight(ctx, ns, route, backend)
		switch {
		case err != nil:
			return nil, r.fail(fmt.Errorf("graph %s: reading its weight in HTTPRoute %s/%s: %w", gc.GraphName, ns, route, err))
		case !found || w == 1:
			// A new graph, which the route's update adds, or one that never left it.
			return after, nil
		}
		if err := r.routes.SetRouteWeight(ctx, ns, route, backend, 1); err != nil {
			return nil, r.fail(fmt.Errorf("graph %s: putting it back in HTTPRoute %s/%s: %w", gc.GraphName, ns, route, err))
		}
		if err := r.routes.ReleaseRoute(ctx, ns, route); err != nil {
			return nil, r.fail(fmt.Errorf("HTTPRoute %s/%s: giving its weights back to the stack: %w", ns, route, err))
		}
		_ = r.ctx.Log.Info(fmt.Sprintf("rollout: graph %s is Ready and passed its smoke test: weight 1 in HTTPRoute %s/%s again", gc.GraphName, ns, route), nil)
		return after, nil
	}).(pulumi.ResourceArrayOutput)
	r.done = done
	r.restored = append(r.restored, done)
}

// fail shows err once, on the stack, and marks it shown (the run's error repeats nothing).
func (r *graphRollout) fail(err error) error {
	if r.ctx.Log.Error(err.Error(), nil) != nil {
		return err
	}
	return shown{err}
}
