// Package teamboundary is what a site installs once so that Kubernetes itself keeps the teams
// sharing a GB200 fleet apart, not only the program's checks:
//
//   - PodPolicy, a ValidatingAdmissionPolicy the API server runs on every pod in a namespace labelled
//     config.PodPolicyLabel (the team namespaces, and the namespaces stacks create at baseline):
//     Pod Security "baseline" written in CEL with the one exemption a worker needs (its main
//     container adds config.WorkerCapabilities and runs as root), and the fleet's rules
//     config.PodSecurity checks at preview (volume types, root, privilege escalation, priority
//     classes, the NVIDIA runtime's variables, nodeName). GraphPolicy refuses a graph that sets a
//     variable the Dynamo operator writes (DYN_NAMESPACE of another team's graph).
//   - TeamNamespace: a team's namespace enforcing Pod Security baseline. Its workers' RuntimeClass
//     is the one exemption the API server's Pod Security configuration makes
//     (PodSecurityAdmissionConfiguration); PodPolicy holds those pods to baseline instead.
//   - Roles: TeamRole in a team's namespaces (TeamBinding), FleetReaderRole for the checks' reads
//     across the fleet, ImpersonatorRole for the portal, which acts as each request's user and
//     team (portal.Options.Impersonate), and with SiteArgs.Workspaces each team's own
//     ServiceAccount in the Pulumi Kubernetes Operator's namespace (WorkspaceServiceAccount), which
//     the operator runner's workspaces run as (pko.Runner.ActAsTeam).
//
// Objects lists them in the order they are applied; NewSite registers them as a Pulumi component
// (SiteToken: the site/ program, and the package's Site resource).
package teamboundary
