package config

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// Key returns the full config key of a path, as users type it: Key("worker.replicas") is
// "minimax-m3:worker.replicas".
func Key(path string) string { return Namespace + ":" + path }

// Raw is a stack's config as Pulumi hands it over: every value under the `minimax-m3:` namespace by
// key without the namespace (objects as JSON text), and which keys are secrets.
type Raw struct {
	Values  map[string]string
	Secrets map[string]bool
}

// HFTokenKey is a secret key (KubeconfigKey the other). The token never enters Config: only the token Secret's
// component receives it, as a Pulumi secret.
const HFTokenKey = "hfToken"

// HFToken is the Hugging Face token the stack holds, or "".
func (r Raw) HFToken() string { return r.Values[HFTokenKey] }

// KubeconfigKey is the other secret key: a kubeconfig's content (from ESC or another stack's
// output) for the Kubernetes provider and the program's reads of the cluster, instead of the
// KUBECONFIG file. kubernetes.context picks a context of it.
const KubeconfigKey = "kubeconfig"

// Kubeconfig is the kubeconfig the stack holds, or "" (the KUBECONFIG file is used).
func (r Raw) Kubeconfig() string { return r.Values[KubeconfigKey] }

// Parse builds a Config from a stack's config: the profile's recipe defaults, overlaid with what the
// stack sets, then validated. The error lists every problem at once, each naming its key.
func Parse(raw Raw) (Config, error) {
	var ps Problems
	profile := Profile(strings.TrimSpace(raw.Values["profile"]))
	c := Defaults(profile)

	v := reflect.ValueOf(&c).Elem()
	fields := structFields(v.Type())
	// setRoles are the top-level keys that set something.
	setRoles := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(raw.Values)) {
		if IsSecretKey(k) {
			if !raw.Secrets[k] {
				what := map[string]string{HFTokenKey: "<token>", KubeconfigKey: "< kubeconfig.yaml"}[k]
				ps.Add(k, "must be stored as a secret: pulumi config set --secret %s %s", Key(k), what)
			}
			continue
		}
		top, rest, dotted := strings.Cut(k, ".")
		i, ok := fields[top]
		if !ok || dotted && !literalPath.MatchString(rest) {
			ps.Add(k, "unknown key (known keys: %s)", strings.Join(Keys(), ", "))
			continue
		}
		if raw.Secrets[k] {
			ps.Add(k, "is not a secret value; set it without --secret")
		}
		text := raw.Values[k]
		switch {
		case dotted:
			// A key set without --path (pulumi config set minimax-m3:worker.replicas 2, or a
			// prompt of `pulumi new`) is the path it names, unless another key sets the same
			// place: Pulumi keeps both, so which one wins would be a guess.
			if other := alsoSets(raw.Values, k); other != "" {
				ps.Add(k, "is set without --path, and %s sets the same value: keep one (pulumi config rm %s)", Key(other), Key(k))
				continue
			}
			decodeValue(&ps, top, nestUnder(strings.Split(rest, "."), text), v.Field(i))
			setRoles[top] = true
		case unset(text):
			// The project file's declared default: the profile's own default applies.
		default:
			decodeTopLevel(&ps, k, text, v.Field(i))
			setRoles[k] = true
		}
	}
	for _, role := range unusedRoles(profile) {
		if setRoles[role] {
			ps.Add(role, "is not used by profile %q; remove it", profile)
		}
	}
	ps = append(ps, validateToken(&c, raw.HFToken() != "")...)
	ps = append(ps, Validate(&c)...)
	if len(ps) > 0 {
		return c, ps.sorted()
	}
	return c, nil
}

// Check validates a Config built in Go (from Defaults) rather than parsed from a stack: every value,
// and that a model download has exactly one source of the token (hasToken: one is given). The
// error lists every problem, each naming its key.
func Check(c *Config, hasToken bool) error {
	ps := append(validateToken(c, hasToken), Validate(c)...)
	if len(ps) > 0 {
		return ps.sorted()
	}
	return nil
}

// literalPath is the rest of a key set without --path that names a field path: dotted names.
var literalPath = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)*$`)

// unset reports whether a top-level value is the empty value Pulumi.yaml declares as its default
// ("" for a name, {} for an object): it sets nothing, so the profile's default applies. (An empty
// top-level name is never a setting of its own: the program would refuse it.) Lists are declared
// with their defaults, since an empty list is a setting (no registry allowed is refused).
func unset(text string) bool {
	switch strings.TrimSpace(text) {
	case "", "{}":
		return true
	}
	return false
}

// alsoSets names another key of values that sets the place the dotted key k names, or part of it:
// the same key, or a key above or below it on the same path (the object its first name holds, where
// pulumi config set --path keeps it, included) whose value holds something on the other's path.
func alsoSets(values map[string]string, k string) string {
	path := strings.Split(k, ".")
	for _, other := range slices.Sorted(maps.Keys(values)) {
		o := strings.Split(other, ".")
		n := min(len(o), len(path))
		if other == k || !slices.Equal(o[:n], path[:n]) {
			continue
		}
		// The shorter key's value reaches the longer one's path, or they name the same place.
		switch {
		case len(o) == len(path):
			return other
		case len(o) < len(path) && holds(values[other], path[len(o):]):
			return other
		case len(o) > len(path) && holds(values[k], o[len(path):]):
			return other
		}
	}
	return ""
}

// holds reports whether the JSON object text holds a value at path.
func holds(text string, path []string) bool {
	var obj any
	if json.Unmarshal([]byte(text), &obj) != nil {
		return false
	}
	for _, name := range path {
		m, ok := obj.(map[string]any)
		if !ok {
			return false
		}
		if obj, ok = m[name]; !ok {
			return false
		}
	}
	return true
}

// nestUnder is a value set at a path of fields, as the object that sets it: text as JSON when it
// is an object or a list, else as it is (decodeValue takes numbers and booleans as text).
func nestUnder(path []string, text string) any {
	var value any = text
	if t := strings.TrimSpace(text); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		dec := json.NewDecoder(strings.NewReader(t))
		dec.UseNumber()
		var parsed any
		if dec.Decode(&parsed) == nil {
			value = parsed
		}
	}
	for i := len(path) - 1; i >= 0; i-- {
		value = map[string]any{path[i]: value}
	}
	return value
}

func unusedRoles(p Profile) []string {
	switch p {
	case Aggregated:
		return []string{"prefillWorker", "decodeWorker"}
	case Disaggregated:
		return []string{"worker"}
	}
	return nil
}

// validateToken checks that the download has exactly one source of the Hugging Face token.
func validateToken(c *Config, hasToken bool) Problems {
	var ps Problems
	if !c.ModelDownload.Enabled {
		return nil
	}
	switch {
	case c.HuggingFace.ExistingSecret && hasToken:
		ps.Add(HFTokenKey, "is set but huggingFace.existingSecret is true: use either the existing Secret %q or a token, not both", c.HuggingFace.SecretName)
	case !c.HuggingFace.ExistingSecret && !hasToken:
		ps.Add(HFTokenKey, "the model download needs a Hugging Face token: pulumi config set --secret %s <token>, or set %s=true to use the existing Secret %q",
			Key(HFTokenKey), Key("huggingFace.existingSecret"), c.HuggingFace.SecretName)
	}
	return ps
}

// Keys lists every top-level config key a stack may set (without the namespace), the secrets
// hfToken and kubeconfig included.
func Keys() []string {
	keys := []string{HFTokenKey, KubeconfigKey}
	for k := range structFields(reflect.TypeFor[Config]()) {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// IsSecretKey reports whether a key must hold a Pulumi secret.
func IsSecretKey(key string) bool { return key == HFTokenKey || key == KubeconfigKey }

// Merge sets what a JSON object names over c, the way a stack value does: objects merge field by
// field, lists replace, numbers and booleans may be written as strings. Every problem, an unknown
// field included, is reported at its key (worker.vllm.maxNumSeqs). It does not validate c.
func Merge(c *Config, data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return Problems{{Key: "", Message: "not JSON: " + err.Error()}}
	}
	if dec.More() {
		return Problems{{Key: "", Message: "more than one JSON value"}}
	}
	var ps Problems
	decodeValue(&ps, "", raw, reflect.ValueOf(c).Elem())
	if len(ps) > 0 {
		return ps
	}
	return nil
}
