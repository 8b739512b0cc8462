// Command site is the site's own small stack: the admission policies, team namespaces and roles of
// package teamboundary, applied once per cluster by whoever runs the fleet (never by a team).
//
//	cd site && pulumi stack init fleet && pulumi config set --path 'teams.team-a[0]' team-a && \
//	  pulumi config set workerRuntimeClass nvidia && pulumi up
package main

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
	rbacv1 "k8s.io/api/rbac/v1"

	"minimax-m3/teamboundary"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		c := config.New(ctx, "")
		var args teamboundary.SiteArgs
		if err := c.TryObject("teams", &args.Teams); err != nil {
			return err
		}
		args.WorkerRuntimeClass = c.Require("workerRuntimeClass")
		_ = c.TryObject("priorityClasses", &args.PriorityClasses)
		if u := c.Get("portalUser"); u != "" {
			args.Portal = &rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u}
		}
		if sa := c.Get("portalServiceAccount"); sa != "" {
			ns, name, ok := strings.Cut(sa, "/")
			if !ok || ns == "" || name == "" || args.Portal != nil {
				return fmt.Errorf("portalServiceAccount: %q is not namespace/name, or portalUser is set too", sa)
			}
			args.Portal = &rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
		}
		args.Workspaces = c.Get("workspaces")
		_, err := teamboundary.NewSite(ctx, "site", args)
		return err
	})
}
