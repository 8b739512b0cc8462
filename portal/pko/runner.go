package pko

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"minimax-m3/config"
	"minimax-m3/internal/objwatch"
	"minimax-m3/portal"
	"minimax-m3/teamboundary"
)

// StackResource is the Pulumi Kubernetes Operator's Stack (v2).
var StackResource = schema.GroupVersionResource{Group: "pulumi.com", Version: "v1", Resource: "stacks"}

// Runner runs requests through the Pulumi Kubernetes Operator instead of this process: it
// writes a Stack object (and the token's Secret), and the operator runs the update in a workspace
// pod of its own. Use it when a portal manages more stacks, or clusters, than one process should run;
// the portal.Manager is simpler for a few stacks next to the portal.
type Runner struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Namespace holds the Stack objects, their Secrets and the workspace pods.
	Namespace string
	// ProjectRepo, Commit and RepoDir: the project's git repository, the reviewed commit to
	// deploy (40 hex) and the directory of Pulumi.yaml. With LocalDir instead, the workspace
	// image holds the project with the program prebuilt there (the operator's local source).
	ProjectRepo, Commit, RepoDir string
	LocalDir                     string
	// Image is the workspace pod's image (required), pinned by digest (…@sha256:<64 hex>): the
	// operator's default is a moving tag, and whatever the image holds runs with the stack's
	// credentials.
	Image string
	// TrackBranch deploys Branch's newest commit instead of Commit: the operator then redeploys
	// every commit pushed to it, with no preview and no approval. An explicit choice, never a
	// fallback.
	TrackBranch bool
	Branch      string
	// Backend and SecretsProvider are the stack's; EnvRefs the workspace's environment from
	// Secrets (PULUMI_CONFIG_PASSPHRASE, PULUMI_ACCESS_TOKEN, cloud credentials).
	Backend, SecretsProvider string
	EnvRefs                  map[string]SecretKey
	// ServiceAccountName is the workspace pod's identity (it needs to reach the target cluster).
	ServiceAccountName string
	// ActAsTeam runs each request's workspace pod as its team's own ServiceAccount instead
	// (teamboundary.WorkspaceServiceAccount, which the site install makes in Namespace and binds
	// where the team's group is bound): the API server's RBAC then decides what the update may
	// write, and its audit log names the team. The team is the site's label on the request's
	// namespace (teamboundary.TeamLabel), and ApplyOptions.Identity must belong to it; a namespace
	// with no team, or a team with no account, is refused before anything is written.
	ActAsTeam bool
	// ImageRegistries are the registries every request's images must come from, as the portal's
	// (a request may not widen them); empty: config.DefaultImageRegistries.
	ImageRegistries []string
	// PriorityClasses are the priority classes a request's pods may name, as the portal's; empty:
	// none.
	PriorityClasses []string
	// Gate checks every request before Apply writes a Stack or Secret, as the portal's up does: the
	// policies and consent for the components it would restart, on a preview. Give it a
	// *portal.Manager of its own (its own StateDir: it keeps each request's config there) on the
	// operator's backend, secrets provider and cluster, whose ProjectDir is a checkout of Commit
	// (or LocalDir's program): what it previews is then what the workspace runs. Without a Gate,
	// Apply refuses unless Ungated says the site checks requests another way. The operator's
	// resyncs (every 10 minutes, with refresh) re-apply the same checked spec.
	Gate    Gate
	Ungated bool
	// Resources are the workspace pod's; DefaultWorkspaceResources when unset (the operator's own
	// default is sized for a prebuilt program, not for compiling this one and running the
	// Kubernetes provider).
	Resources *corev1.ResourceRequirements
}

// Gate is what checks a request before the runner writes it (portal.Manager.Check).
type Gate interface {
	Check(ctx context.Context, r portal.Request, o portal.RunOptions) error
}

// ApplyOptions are an Apply's: a server-side dry run, and the consent for what the request
// restarts (the graph components, comma-separated, or "all"; as portal.RunOptions.AllowRoll).
type ApplyOptions struct {
	DryRun    bool
	AllowRoll string
	// Identity is who the request is for: passed to the Gate (whose preview then acts as them,
	// portal.Options.Impersonate), and with ActAsTeam it must be of the namespace's team.
	Identity portal.Identity
}

// ErrUngated is Apply's refusal when the runner has no Gate and is not Ungated.
var ErrUngated = errors.New("the runner has no Gate: set Runner.Gate (a portal.Manager on the operator's backend) so that the policies and roll consent check each request, or Ungated if the site checks them another way")

// DefaultWorkspaceResources fit one update of this program in a workspace pod: the Go build (from
// a repository; none with a prebuilt image), the engine and the Kubernetes provider.
func DefaultWorkspaceResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
	}
}

// SecretKey is one key of a Secret in the runner's namespace.
type SecretKey struct{ Name, Key string }

func (k SecretKey) ref(ns string) map[string]any {
	return map[string]any{"type": "Secret", "secret": map[string]any{"name": k.Name, "key": k.Key, "namespace": ns}}
}

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// TokenSecretName is the Secret that holds a stack's Hugging Face token for the operator.
func TokenSecretName(stack string) string { return stack + "-hf-token" }

// StackObject is the Stack the runner writes for a request: the project's source, the stack's
// config (the same values the Manager writes), the token through a Secret reference, backend and
// secrets provider, and the environment from Secrets.
func (o *Runner) StackObject(r portal.Request) (*unstructured.Unstructured, error) {
	return o.stackObject(r, o.ServiceAccountName)
}

func (o *Runner) stackObject(r portal.Request, account string) (*unstructured.Unstructured, error) {
	// As the portal's own runs: a workspace that cannot read the cluster refuses instead of
	// skipping the ownership and placement checks (many teams share it).
	r.Config.Kubernetes.RequireRead = true
	values, err := r.SiteValues()
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{}
	for k, v := range values {
		cfg[config.Key(k)] = v
	}
	spec := map[string]any{
		"stack":                  r.Name(),
		"config":                 cfg,
		"refresh":                true,
		"destroyOnFinalize":      false,
		"retryOnUpdateConflict":  true,
		"resyncFrequencySeconds": int64(600),
	}
	if r.HFToken != "" {
		spec["secretsRef"] = map[string]any{config.Key(config.HFTokenKey): SecretKey{Name: TokenSecretName(r.Name()), Key: "token"}.ref(o.Namespace)}
	}
	if o.Backend != "" {
		spec["backend"] = o.Backend
	}
	if o.SecretsProvider != "" {
		spec["secretsProvider"] = o.SecretsProvider
	}
	if len(o.EnvRefs) > 0 {
		env := map[string]any{}
		for _, k := range slices.Sorted(maps.Keys(o.EnvRefs)) {
			env[k] = o.EnvRefs[k].ref(o.Namespace)
		}
		spec["envRefs"] = env
	}
	if !digestPinned.MatchString(o.Image) {
		return nil, fmt.Errorf("the operator runner needs the workspace Image pinned by digest (name@sha256:<64 hex>), got %q", o.Image)
	}
	if account == "" {
		return nil, errors.New("the operator runner needs the ServiceAccountName the site gives workspace pods (the operator's default is the namespace's default account), or ActAsTeam")
	}
	workspace := map[string]any{"image": o.Image}
	switch {
	case o.LocalDir != "" && o.ProjectRepo == "":
		workspace["local"] = map[string]any{"dir": o.LocalDir}
	case o.ProjectRepo != "":
		spec["projectRepo"] = o.ProjectRepo
		switch {
		case o.TrackBranch && o.Commit == "" && o.Branch != "":
			spec["branch"] = o.Branch
		case !o.TrackBranch && commitPattern.MatchString(o.Commit) && o.Branch == "":
			spec["commit"] = o.Commit
		default:
			return nil, fmt.Errorf("the operator runner deploys a reviewed commit: set Commit to its 40-hex id (got %q), "+
				"or TrackBranch with Branch (and no Commit) to redeploy every commit pushed to the branch unreviewed", o.Commit)
		}
		if o.RepoDir != "" {
			spec["repoDir"] = o.RepoDir
		}
	default:
		return nil, errors.New("the operator runner needs ProjectRepo (with Commit or Branch) or LocalDir (a prebuilt program in Image)")
	}
	workspace["serviceAccountName"] = account
	res := DefaultWorkspaceResources()
	if o.Resources != nil {
		res = *o.Resources
	}
	quantities := func(l corev1.ResourceList) map[string]any {
		m := map[string]any{}
		for k, v := range l {
			m[string(k)] = v.String()
		}
		return m
	}
	resources := map[string]any{}
	if len(res.Requests) > 0 {
		resources["requests"] = quantities(res.Requests)
	}
	if len(res.Limits) > 0 {
		resources["limits"] = quantities(res.Limits)
	}
	workspace["resources"] = resources
	if len(workspace) > 0 {
		spec["workspaceTemplate"] = map[string]any{"spec": workspace}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "pulumi.com/v1", "kind": "Stack",
		"metadata": map[string]any{"name": r.Name(), "namespace": o.Namespace, "labels": map[string]any{
			"app.kubernetes.io/part-of": "minimax-m3", "minimax-m3.io/base": r.Base, managedBy: fieldManager,
		}},
		"spec": spec,
	}}
	return u, nil
}

// Apply validates the request, has the Gate check it (the policies and consent, on a preview),
// and writes the token's Secret and the Stack (server-side apply, or a server-side dry run). The
// operator then runs the update. A refusal writes nothing.
func (o *Runner) Apply(ctx context.Context, r portal.Request, ao ApplyOptions) (*unstructured.Unstructured, error) {
	if o.Gate == nil && !o.Ungated {
		return nil, ErrUngated
	}
	ps := append(append(portal.BindRegistries(&r, o.ImageRegistries), portal.BindPriorityClasses(&r, o.PriorityClasses)...), portal.BindPodSecurity(&r)...)
	if ps = append(ps, r.Validate()...); len(ps) > 0 {
		return nil, &portal.InvalidRequestError{Problems: ps}
	}
	account, team := o.ServiceAccountName, ""
	if o.ActAsTeam {
		var err error
		if account, team, err = o.teamAccount(ctx, r, ao.Identity); err != nil {
			return nil, err
		}
	}
	stack, err := o.stackObject(r, account)
	if err != nil {
		return nil, err
	}
	if team != "" {
		labels := stack.GetLabels()
		labels[teamboundary.TeamLabel] = team
		stack.SetLabels(labels)
	}
	// Never forced: a field another manager owns is a conflict, not taken over. And an object of
	// the same name this runner did not make (another team's, another tool's) is not touched.
	opts := metav1.ApplyOptions{FieldManager: fieldManager}
	if ao.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if err := o.ours(ctx, r, team, ao.Identity.User); err != nil {
		return nil, err
	}
	if o.Gate != nil {
		if err := o.Gate.Check(ctx, r, portal.RunOptions{AllowRoll: ao.AllowRoll, Identity: ao.Identity}); err != nil {
			return nil, portal.ScrubError(err, r.HFToken)
		}
	}
	if r.HFToken != "" {
		secret := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: TokenSecretName(r.Name()), Namespace: o.Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "minimax-m3", managedBy: fieldManager}},
			Type:       corev1.SecretTypeOpaque,
			StringData: map[string]string{"token": r.HFToken.Reveal()},
		}
		if team != "" {
			secret.Labels[teamboundary.TeamLabel] = team
		}
		body, err := json.Marshal(secret)
		if err != nil {
			return nil, err
		}
		if _, err := o.Kube.CoreV1().Secrets(o.Namespace).Patch(ctx, secret.Name, types.ApplyPatchType, body, patchOptions(opts)); err != nil {
			return nil, fmt.Errorf("token Secret: %s", r.HFToken.Scrub(err.Error()))
		}
	}
	return o.Dynamic.Resource(StackResource).Namespace(o.Namespace).Apply(ctx, stack.GetName(), stack, opts)
}

// NotTheTeamsError refuses a request the runner would run as a team it cannot name, or for an
// identity outside that team.
type NotTheTeamsError struct{ Namespace, Team, User, Reason string }

func (e *NotTheTeamsError) Error() string {
	where := fmt.Sprintf("team %q", e.Team)
	if e.Namespace != "" {
		where = fmt.Sprintf("namespace %s (team %q)", e.Namespace, e.Team)
	}
	return fmt.Sprintf("%s, for %q: %s", where, e.User, e.Reason)
}

// memberOf reports whether id is in team's group (a team of "" has no members).
func memberOf(id *portal.Identity, team string) bool {
	return id != nil && team != "" && slices.Contains(id.Groups, team)
}

func userOf(id *portal.Identity) string {
	if id == nil {
		return ""
	}
	return id.User
}

// teamAccount is the ServiceAccount a request's workspace runs as under ActAsTeam: its namespace's
// team's, which the identity must belong to.
func (o *Runner) teamAccount(ctx context.Context, r portal.Request, id portal.Identity) (account, team string, err error) {
	if id.User == "" {
		return "", "", portal.ErrNoIdentity
	}
	name := r.Config.Namespace.Name
	if r.Config.Namespace.Create {
		return "", "", &NotTheTeamsError{Namespace: name, User: id.User, Reason: "namespace.create: a team deploys into a namespace the site handed it (namespace.create false), never one it creates"}
	}
	ns, err := o.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", "", &NotTheTeamsError{Namespace: name, User: id.User, Reason: "no such namespace: the runner acts as a team in the namespaces the site hands it"}
	}
	if err != nil {
		return "", "", err
	}
	team = ns.Labels[teamboundary.TeamLabel]
	if team == "" {
		return "", "", &NotTheTeamsError{Namespace: name, User: id.User, Reason: "not a team's namespace (no " + teamboundary.TeamLabel + " label from the site install)"}
	}
	if !slices.Contains(id.Groups, team) {
		return "", "", &NotTheTeamsError{Namespace: name, Team: team, User: id.User, Reason: "not in the team's group"}
	}
	account = teamboundary.WorkspaceServiceAccount(team)
	sa, err := o.Kube.CoreV1().ServiceAccounts(o.Namespace).Get(ctx, account, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", "", &NotTheTeamsError{Namespace: name, Team: team, User: id.User, Reason: fmt.Sprintf("the team has no workspace ServiceAccount %s/%s (the site install's workspaces)", o.Namespace, account)}
	case err != nil:
		return "", "", err
	case sa.Labels[teamboundary.TeamLabel] != team:
		// An account of that name the site did not make for the team (the portal's own, say).
		return "", "", &NotTheTeamsError{Namespace: name, Team: team, User: id.User, Reason: fmt.Sprintf("ServiceAccount %s/%s is not the site's workspace account of the team (its %s label is %q)", o.Namespace, account, teamboundary.TeamLabel, sa.Labels[teamboundary.TeamLabel])}
	}
	return account, team, nil
}

func patchOptions(o metav1.ApplyOptions) metav1.PatchOptions {
	return metav1.PatchOptions{FieldManager: o.FieldManager, Force: &o.Force, DryRun: o.DryRun}
}

const (
	// fieldManager is the runner's field manager, and the value of its managedBy label.
	fieldManager = "minimax-m3-portal"
	managedBy    = "app.kubernetes.io/managed-by"
)

var digestPinned = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)

// NotOursError is an object of a request's name that this runner did not make.
type NotOursError struct{ Kind, Namespace, Name, ManagedBy string }

func (e *NotOursError) Error() string {
	by := e.ManagedBy
	if by == "" {
		by = "no one recorded"
	}
	return fmt.Sprintf("%s %s/%s exists and this portal did not make it (%s=%s): it is left as it is; name the stack otherwise, or have its owner remove it",
		e.Kind, e.Namespace, e.Name, managedBy, by)
}

// ours refuses a request whose Stack or token Secret exists without the runner's label, or, acting
// as a team (team not ""), is another team's.
func (o *Runner) ours(ctx context.Context, r portal.Request, team, user string) error {
	stack, err := o.Dynamic.Resource(StackResource).Namespace(o.Namespace).Get(ctx, r.Name(), metav1.GetOptions{})
	switch {
	case err == nil && stack.GetLabels()[managedBy] != fieldManager:
		return &NotOursError{Kind: "Stack", Namespace: o.Namespace, Name: r.Name(), ManagedBy: stack.GetLabels()[managedBy]}
	case err == nil && team != "" && stack.GetLabels()[teamboundary.TeamLabel] != team:
		return &NotTheTeamsError{Namespace: r.Config.Namespace.Name, Team: team, User: user, Reason: fmt.Sprintf("Stack %s/%s is team %q's: name the stack otherwise", o.Namespace, r.Name(), stack.GetLabels()[teamboundary.TeamLabel])}
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	if r.HFToken == "" {
		return nil
	}
	secret, err := o.Kube.CoreV1().Secrets(o.Namespace).Get(ctx, TokenSecretName(r.Name()), metav1.GetOptions{})
	switch {
	case err == nil && secret.Labels[managedBy] != fieldManager:
		return &NotOursError{Kind: "Secret", Namespace: o.Namespace, Name: secret.Name, ManagedBy: secret.Labels[managedBy]}
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	return nil
}

// Result is how the operator left a Stack.
type Result struct {
	// State is the last update's state (succeeded, failed), Message its message.
	State, Message string
	// Outputs are the stack's outputs as the operator reports them.
	Outputs portal.Outputs
}

// UpdateFailedError is the operator's failed update of a Stack's current generation: it keeps
// retrying (Reconciling) and stalls only after several failures; the failure is already the
// answer.
type UpdateFailedError struct {
	Stack, Message string
	Failures       int64
}

func (e *UpdateFailedError) Error() string {
	return fmt.Sprintf("stack %s: the operator's update failed (%d failure(s) at this generation): %s", e.Stack, e.Failures, e.Message)
}

// StalledError is a Stack the operator gave up on until its spec changes.
type StalledError struct{ Stack, Reason, Message string }

func (e *StalledError) Error() string {
	return fmt.Sprintf("stack %s stalled: %s: %s", e.Stack, e.Reason, e.Message)
}

// Wait follows a Stack's status conditions until the operator reports it Ready for its current
// generation (the result), a failed update of that generation (an UpdateFailedError) or Stalled
// (a StalledError), reporting each change as progress.
func (o *Runner) Wait(ctx context.Context, stack string, progress func(portal.Event)) (Result, error) {
	stacks := o.Dynamic.Resource(StackResource).Namespace(o.Namespace)
	lw := objwatch.ByName(stack, stacks.List, stacks.Watch)
	var res Result
	var last string
	start := time.Now()
	_, err := objwatch.Until(ctx, lw, &unstructured.Unstructured{}, nil, func(e watch.Event) (bool, error) {
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("stack %s was deleted", stack)
		}
		u, ok := e.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		conds := conditions(u)
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		summary := fmt.Sprintf("%v", conds)
		if summary != last && progress != nil {
			last = summary
			for _, typ := range []string{"Reconciling", "Stalled", "Ready"} {
				if c, ok := conds[typ]; ok && c.Status == "True" {
					progress(portal.Event{Time: time.Now(), Stack: stack, Type: "pulumi.com/v1:Stack", Name: stack,
						Status: typ, Message: c.Reason + ": " + c.Message, Elapsed: time.Since(start).Round(time.Second)})
				}
			}
		}
		state, _, _ := unstructured.NestedString(u.Object, "status", "lastUpdate", "state")
		updated, _, _ := unstructured.NestedInt64(u.Object, "status", "lastUpdate", "generation")
		if state == "failed" && updated == u.GetGeneration() {
			msg, _, _ := unstructured.NestedString(u.Object, "status", "lastUpdate", "message")
			failures, _, _ := unstructured.NestedInt64(u.Object, "status", "lastUpdate", "failures")
			return false, &UpdateFailedError{Stack: stack, Message: msg, Failures: failures}
		}
		if observed < u.GetGeneration() {
			return false, nil
		}
		if c, ok := conds["Stalled"]; ok && c.Status == "True" {
			return false, &StalledError{Stack: stack, Reason: c.Reason, Message: c.Message}
		}
		if c, ok := conds["Ready"]; ok && c.Status == "True" {
			res.State, _, _ = unstructured.NestedString(u.Object, "status", "lastUpdate", "state")
			res.Message, _, _ = unstructured.NestedString(u.Object, "status", "lastUpdate", "message")
			outputs, _, _ := unstructured.NestedMap(u.Object, "status", "outputs")
			res.Outputs = portal.OutputsFromMap(outputs)
			return true, nil
		}
		return false, nil
	})
	return res, err
}

type condition struct{ Status, Reason, Message string }

func conditions(u *unstructured.Unstructured) map[string]condition {
	out := map[string]condition{}
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range list {
		m, _ := c.(map[string]any)
		typ, _ := m["type"].(string)
		st, _ := m["status"].(string)
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		out[typ] = condition{st, reason, msg}
	}
	return out
}

// Delete removes a request's Stack and token Secret; the operator keeps the stack's resources
// (destroyOnFinalize is off, as a portal deletes resources on purpose, with Manager.Destroy or a
// Stack that sets it).
// Neither is deleted unless the runner made it (NotOursError), and each only as it was read (a
// UID precondition).
// Acting as a team, it deletes only for a member of the Stack's team (DeleteAs); Delete refuses.
func (o *Runner) Delete(ctx context.Context, stack string) error {
	if o.ActAsTeam {
		return portal.ErrNoIdentity
	}
	return o.delete(ctx, stack, nil)
}

// DeleteAs is Delete for id: acting as a team, only a member of the Stack's team may delete it.
func (o *Runner) DeleteAs(ctx context.Context, stack string, id portal.Identity) error {
	if o.ActAsTeam && id.User == "" {
		return portal.ErrNoIdentity
	}
	return o.delete(ctx, stack, &id)
}

func (o *Runner) delete(ctx context.Context, stack string, id *portal.Identity) error {
	stacks := o.Dynamic.Resource(StackResource).Namespace(o.Namespace)
	s, err := stacks.Get(ctx, stack, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case s.GetLabels()[managedBy] != fieldManager:
		return &NotOursError{Kind: "Stack", Namespace: o.Namespace, Name: stack, ManagedBy: s.GetLabels()[managedBy]}
	case o.ActAsTeam && !memberOf(id, s.GetLabels()[teamboundary.TeamLabel]):
		return &NotTheTeamsError{Team: s.GetLabels()[teamboundary.TeamLabel], User: userOf(id), Reason: fmt.Sprintf("Stack %s/%s is not of a team of theirs", o.Namespace, stack)}
	default:
		uid := s.GetUID()
		if err := stacks.Delete(ctx, stack, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	secrets := o.Kube.CoreV1().Secrets(o.Namespace)
	sec, err := secrets.Get(ctx, TokenSecretName(stack), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case sec.Labels[managedBy] != fieldManager:
		return &NotOursError{Kind: "Secret", Namespace: o.Namespace, Name: sec.Name, ManagedBy: sec.Labels[managedBy]}
	case o.ActAsTeam && !memberOf(id, sec.Labels[teamboundary.TeamLabel]):
		return &NotTheTeamsError{Team: sec.Labels[teamboundary.TeamLabel], User: userOf(id), Reason: fmt.Sprintf("Secret %s/%s is not of a team of theirs", o.Namespace, sec.Name)}
	}
	uid := sec.UID
	if err := secrets.Delete(ctx, sec.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
