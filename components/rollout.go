package components

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
	"minimax-m3/internal/cluster"
	"minimax-m3/manifest"
)

// RouteWeights sets the route's weights during an update of running graphs, graph by graph
// (internal/cluster.Reader: JSON patches under its own field manager).
type RouteWeights interface {
	// RouteWeights are the route's backends' weights by name, and whether the route exists.
	RouteWeights(ctx context.Context, namespace, route string) (map[string]int64, bool, error)
	SetRouteWeight(ctx context.Context, namespace, route, backend string, weight int64) error
	// HoldsRoute reports whether an interrupted rollout's field manager still holds the route's
	// rules; ReleaseRoute gives them up (their values stay).
	HoldsRoute(ctx context.Context, namespace, route string) (bool, error)
	ReleaseRoute(ctx context.Context, namespace, route string) error
}

// graphRollout takes the graphs of a stack of several out of its route one at a time while a
// change rolls their pods: before graph n's change its weight goes to 0 and its streams get
// scaleOut.drain to finish; once it is Ready again and has passed its smoke test its weight goes
// back to 1, and only then does graph n+1 drain. A graph that is the only one the route sends to
// changes in place. A change that fails leaves its graph at 0 (the others serve the route); the
// next up sets it back once the graph serves again. Every up first gives the route's rules back
// from an interrupted rollout, so that the route's own update meets no conflict.
type graphRollout struct {
	ctx    *pulumi.Context
	routes RouteWeights
	c      *config.Config
	// drains is false where nothing may be taken out of the route: one graph, or nothing
	// waiting for Ready (readiness.waitForReady off) to say when a graph serves again.
	drains bool
	// done resolves once the graph before is back in the route (or needed nothing).
	done pulumi.ResourceArrayOutput
	// restored are what each graph's return to the route waits for, for the route's own update.
	restored []pulumi.ResourceArrayInput
}

func newGraphRollout(ctx *pulumi.Context, routes RouteWeights, c *config.Config) *graphRollout {
	if routes == nil || !c.Exposure.Enabled {
		return nil
	}
	r := &graphRollout{ctx: ctx, routes: routes, c: c, drains: c.ScaledOut() && c.Readiness.WaitForReady}
	route, ns := c.RouteName(), c.Namespace.Name
	if ctx.DryRun() {
		rctx, cancel := context.WithTimeout(ctx.Context(), time.Minute)
		defer cancel()
		if held, err := routes.HoldsRoute(rctx, ns, route); err == nil && held {
			_ = ctx.Log.Warn(fmt.Sprintf("HTTPRoute %s/%s: an interrupted rollout (field manager %s) still holds its rules; `up` gives them back first, "+
				"and until then a preview of a change of the route may report a conflict with that manager", ns, route, cluster.RolloutFieldManager), nil)
		}
		r.done = pulumi.ResourceArray{}.ToResourceArrayOutput()
		return r
	}
	r.done = pulumi.ResourceArray{}.ToResourceArrayOutput().ApplyTWithContext(ctx.Context(), func(cctx context.Context, after []pulumi.Resource) ([]pulumi.Resource, error) {
		if err := routes.ReleaseRoute(cctx, ns, route); err != nil {
			return nil, r.fail(fmt.Errorf("HTTPRoute %s/%s: giving its rules back from an interrupted rollout: %w", ns, route, err))
		}
		return after, nil
	}).(pulumi.ResourceArrayOutput)
	r.restored = append(r.restored, r.done)
	return r
}

// rolls names the components whose pods the update replaces on a live graph (live: its
// annotations), nil when none does or the graph is new.
func rolls(live map[string]string, gc *config.Config, decided manifest.Decisions) []string {
	if live == nil {
		return nil
	}
	planned, err := manifest.TemplateDigests(gc, decided)
	if err != nil {
		return []string{"every component"}
	}
	return manifest.RolledComponents(live, planned)
}

// drain is what the change of graph gc, running (live) or new, waits for: for a running graph,
// the graph before it back in the route and, when the change rolls pods (rolled), the graph out
// of the route for scaleOut.drain. A new graph waits for none: it is not in the route yet. A
// preview says what each graph's change will do.
func (r *graphRollout) drain(gc *config.Config, live bool, rolled []string) pulumi.ResourceArrayOutput {
	if r == nil || !r.drains || !live {
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
		weights, found, err := r.routes.RouteWeights(ctx, ns, route)
		if err != nil {
			return nil, r.fail(fmt.Errorf("graph %s: reading HTTPRoute %s/%s before its change: %w", gc.GraphName, ns, route, err))
		}
		w, in := weights[backend]
		serving := 0
		for name, other := range weights {
			if name != backend && other > 0 {
				serving++
			}
		}
		switch {
		case !found || !in:
			// Not in the route (yet): nothing to take out of it.
			return after, nil
		case w == 0:
			// Out of it already (an earlier change failed): no stream to wait for.
			return after, nil
		case serving == 0:
			_ = r.ctx.Log.Warn(fmt.Sprintf("rollout: graph %s is the only graph HTTPRoute %s/%s sends to: it changes in place, in the route "+
				"(taking it out would leave the route nothing to serve)", gc.GraphName, ns, route), nil)
			return after, nil
		}
		if err := r.routes.SetRouteWeight(ctx, ns, route, backend, 0); err != nil {
			return nil, r.fail(fmt.Errorf("graph %s: taking it out of HTTPRoute %s/%s before its change: %w", gc.GraphName, ns, route, err))
		}
		_ = r.ctx.Log.Info(fmt.Sprintf("rollout: graph %s has weight 0 in HTTPRoute %s/%s; its streams get %s to finish (scaleOut.drain) before the change rolls %s",
			gc.GraphName, ns, route, drain, strings.Join(rolled, ", ")), nil)
		time.Sleep(drain)
		return after, nil
	}).(pulumi.ResourceArrayOutput)
}

// restore puts running graph gc back in the route once it serves (serving: its Ready and its
// smoke test), when it is out of it, and gives the route's rules back; the next graph's drain
// waits for it. A new graph joins the route through the route's own update.
func (r *graphRollout) restore(gc *config.Config, live bool, serving pulumi.ResourceArrayOutput) {
	if r == nil || !r.drains || !live || r.ctx.DryRun() {
		return
	}
	backend, route, ns := string(RouteBackend(gc).Name), r.c.RouteName(), r.c.Namespace.Name
	done := pulumi.All(r.done, serving).ApplyTWithContext(r.ctx.Context(), func(ctx context.Context, v []any) ([]pulumi.Resource, error) {
		after := v[1].([]pulumi.Resource)
		weights, found, err := r.routes.RouteWeights(ctx, ns, route)
		if err != nil {
			return nil, r.fail(fmt.Errorf("graph %s: reading its weight in HTTPRoute %s/%s: %w", gc.GraphName, ns, route, err))
		}
		if w, in := weights[backend]; !found || !in || w != 0 {
			// Not in the route (the route's update adds it), or never out of it.
			return after, nil
		}
		if err := r.routes.SetRouteWeight(ctx, ns, route, backend, 1); err != nil {
			return nil, r.fail(fmt.Errorf("graph %s: putting it back in HTTPRoute %s/%s: %w", gc.GraphName, ns, route, err))
		}
		if err := r.routes.ReleaseRoute(ctx, ns, route); err != nil {
			return nil, r.fail(fmt.Errorf("HTTPRoute %s/%s: giving its rules back to the stack: %w", ns, route, err))
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
