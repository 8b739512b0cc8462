package portal

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// Request names a stack and what it deploys.
type Request struct {
	// Base is the committed stack the new one starts from: "agg" or "disagg" (Pulumi.<base>.yaml).
	Base string `json:"base"`
	// Stack is the stack's own name (agg-team-a, disagg-eu, …); Base when empty.
	Stack string `json:"stack"`
	// Config is the whole configuration the stack deploys, typed: start from NewRequest, which
	// fills it with the base profile's defaults, and change the site values. Only what differs
	// from the defaults is written to the stack's config.
	Config config.Config `json:"config"`
	// HFToken is the Hugging Face token, stored as a Pulumi secret. Empty keeps the one the stack
	// holds. It is never printed, logged, serialized or passed on a command line.
	HFToken Secret `json:"hfToken,omitzero"`
}

// Secret is a string that does not print or serialize its value.
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[secret]"
}

// GoString hides the value from %#v as well.
func (s Secret) GoString() string { return s.String() }

// MarshalJSON writes "[secret]", never the value.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Reveal is the value, for the one place that stores it.
func (s Secret) Reveal() string { return string(s) }

// Scrub is text with every occurrence of the secret replaced by "[secret]".
func (s Secret) Scrub(text string) string {
	if s == "" {
		return text
	}
	return strings.ReplaceAll(text, s.Reveal(), "[secret]")
}

// NewRequest is a request for stack on base, its config the base profile's defaults.
func NewRequest(base, stack string) Request {
	return Request{Base: base, Stack: stack, Config: config.Defaults(config.Profile(base))}
}

// Name is the stack's name.
func (r Request) Name() string {
	if r.Stack == "" {
		return r.Base
	}
	return r.Stack
}

// stackName is a stack name the portal accepts: a Pulumi stack name that is also one directory
// name (never a path) and, with the operator runner's "-hf-token" suffix, a Kubernetes object name
// (an RFC 1123 label of at most 63 characters).
var stackName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,52}[a-z0-9])?$`)

// CheckStackName refuses a name that is not a stack name, before anything uses it.
func CheckStackName(name string) error {
	if stackName.MatchString(name) {
		return nil
	}
	var ps config.Problems
	ps.Add("stack", "%q is not a stack name: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 54 characters", name)
	return &InvalidRequestError{Problems: ps}
}

// Validate checks the request with the program's own rules (config.Parse on exactly the values the
// stack would hold), before any engine starts. The problems name the config keys. A request
// without a token is checked as a new stack's, which needs one (unless the download is off or
// uses an existing Secret); the Manager knows when the stack already holds one.
func (r Request) Validate() config.Problems { return r.validate(false) }

func (r Request) validate(storedToken bool) config.Problems {
	var ps config.Problems
	switch r.Base {
	case string(config.Aggregated), string(config.Disaggregated):
	default:
		ps.Add("base", "%q is not a base stack: agg or disagg", r.Base)
		return ps
	}
	if err := CheckStackName(r.Name()); err != nil {
		ps = append(ps, err.(*InvalidRequestError).Problems...)
	}
	if r.Config.Profile != config.Profile(r.Base) {
		ps.Add("profile", "is %q but the base stack is %q: start from NewRequest(%q, …)", r.Config.Profile, r.Base, r.Base)
		return ps
	}
	values, err := r.SiteValues()
	if err != nil {
		ps.Add("config", "%v", err)
		return ps
	}
	raw := config.Raw{Values: values, Secrets: map[string]bool{}}
	switch {
	case r.HFToken != "":
		raw.Values[config.HFTokenKey] = r.HFToken.Reveal()
		raw.Secrets[config.HFTokenKey] = true
	case storedToken:
		raw.Values[config.HFTokenKey] = "stored"
		raw.Secrets[config.HFTokenKey] = true
	}
	c, err := config.Parse(raw)
	if err != nil {
		var parsed config.Problems
		if ok := asProblems(err, &parsed); ok {
			return append(ps, parsed...)
		}
		ps.Add("config", "%v", err)
		return ps
	}
	// The program's own check of what it writes (the flags extraArgs may not repeat).
	return append(ps, manifest.RepeatedFlags(&c)...)
}

func asProblems(err error, into *config.Problems) bool {
	p, ok := err.(config.Problems)
	if ok {
		*into = p
	}
	return ok
}

// SiteValues are the stack's config values (keys without the namespace): the profile, and every
// top-level key whose value differs from the profile's defaults, objects reduced to the fields that
// differ, as JSON text.
func (r Request) SiteValues() (map[string]string, error) {
	defaults := config.Defaults(r.Config.Profile)
	want, def := reflect.ValueOf(r.Config), reflect.ValueOf(defaults)
	out := map[string]string{"profile": string(r.Config.Profile)}
	t := want.Type()
	for i := range t.NumField() {
		name := jsonName(t.Field(i))
		if name == "" || name == "profile" {
			continue
		}
		d, changed := diff(want.Field(i), def.Field(i))
		if !changed {
			continue
		}
		if s, ok := d.(string); ok {
			out[name] = s
			continue
		}
		b, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = string(b)
	}
	return out, nil
}

// diff is a value reduced to what differs from the default: structs field by field, anything else
// whole.
func diff(v, d reflect.Value) (any, bool) {
	if v.Kind() == reflect.Struct {
		m := map[string]any{}
		for i := range v.NumField() {
			name := jsonName(v.Type().Field(i))
			if name == "" {
				continue
			}
			if fd, ok := diff(v.Field(i), d.Field(i)); ok {
				m[name] = fd
			}
		}
		return m, len(m) > 0
	}
	if reflect.DeepEqual(v.Interface(), d.Interface()) {
		return nil, false
	}
	return v.Interface(), true
}

func jsonName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return f.Name
	}
	return name
}

// ScrubError is err without the request's token in its text, its problems' messages included
// (a token pasted into another field must not come back in a response or an operation's log).
// The status is taken from err before.
func ScrubError(err error, secret Secret) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret.Reveal()) {
		return err
	}
	var invalid *InvalidRequestError
	if errors.As(err, &invalid) {
		ps := make(config.Problems, len(invalid.Problems))
		for i, p := range invalid.Problems {
			p.Message = secret.Scrub(p.Message)
			ps[i] = p
		}
		return &InvalidRequestError{Problems: ps}
	}
	return errors.New(secret.Scrub(err.Error()))
}

// SiteRegistries is a site's list of image registries; empty is config.DefaultImageRegistries.
func SiteRegistries(site []string) []string {
	if len(site) == 0 {
		return config.DefaultImageRegistries
	}
	return site
}

// BindRegistries makes the site's registries (SiteRegistries) the request's, whatever it says: a
// request may leave them as the default, never name others, which is refused at imageRegistries.
func BindRegistries(r *Request, site []string) config.Problems {
	registries := SiteRegistries(site)
	var ps config.Problems
	if got := r.Config.ImageRegistries; !slices.Equal(got, config.DefaultImageRegistries) && !slices.Equal(got, registries) {
		ps.Add("imageRegistries", "is the portal's to set (%s), not a request's", strings.Join(registries, ", "))
	}
	r.Config.ImageRegistries = slices.Clone(registries)
	return ps
}

// BindPodSecurity refuses a request that sets namespace.podSecurity privileged: a portal's user may
// not lower the guard of the namespace their stack creates.
func BindPodSecurity(r *Request) config.Problems {
	var ps config.Problems
	if r.Config.Namespace.PodSecurity == config.PodSecurityPrivileged {
		ps.Add("namespace.podSecurity", "a request may not lower the Pod Security of the namespace it creates: leave it unset (the cluster's level: baseline where the site's install is found, privileged where there is none) or set baseline")
	}
	return ps
}

// BindPriorityClasses makes the site's priority classes the request's: a request may leave them
// unset, never name others, which is refused at priorityClasses.
func BindPriorityClasses(r *Request, site []string) config.Problems {
	var ps config.Problems
	if got := r.Config.PriorityClasses; len(got) > 0 && !slices.Equal(got, site) {
		ps.Add("priorityClasses", "is the portal's to set (%s), not a request's", strings.Join(site, ", "))
	}
	r.Config.PriorityClasses = slices.Clone(site)
	return ps
}
