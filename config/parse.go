package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// Key returns the full config key of a path, as users type it: Key("worker.replicas") is
// "minimax-m3:worker.replicas".
func Key(path string) string { return Namespace + ":" + path }

// Raw is a stack's config as Pulumi hands it over: values by key without the namespace (objects as
// JSON text), and which keys are secrets.
type Raw struct {
	Values  map[string]string
	Secrets map[string]bool
}

// hfTokenKey is the one secret key; it is kept out of Config's JSON on purpose.
const hfTokenKey = "hfToken"

// Parse builds a Config from a stack's config: the profile's recipe defaults, overlaid with what the
// stack sets, then validated. The error lists every problem at once, each naming its key.
func Parse(raw Raw) (Config, error) {
	var problems Problems
	profile := Profile(strings.TrimSpace(raw.Values["profile"]))
	c := Defaults(profile)

	keys := make([]string, 0, len(raw.Values))
	for k := range raw.Values {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	fields := topLevelFields(&c)
	for _, k := range keys {
		v := raw.Values[k]
		if k == hfTokenKey {
			if !raw.Secrets[k] {
				problems.Add(k, "must be stored as a secret: pulumi config set --secret %s", Key(k))
			}
			c.HFToken = v
			continue
		}
		field, ok := fields[k]
		if !ok {
			problems.Add(k, "unknown key (known keys: %s)", strings.Join(knownKeys(fields), ", "))
			continue
		}
		if raw.Secrets[k] {
			problems.Add(k, "is not a secret value; set it without --secret")
		}
		if err := decodeInto(field, v); err != nil {
			problems.Add(k, "%v", err)
		}
	}
	for _, role := range unusedRoles(profile) {
		if _, set := raw.Values[role]; set {
			problems.Add(role, "is not used by profile %q; remove it", profile)
		}
	}
	problems = append(problems, Validate(&c)...)
	if len(problems) > 0 {
		return c, problems
	}
	return c, nil
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

// topLevelFields maps each config key to the field it sets.
func topLevelFields(c *Config) map[string]reflect.Value {
	fields := map[string]reflect.Value{}
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = v.Field(i)
	}
	return fields
}

func knownKeys(fields map[string]reflect.Value) []string {
	keys := []string{hfTokenKey}
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// decodeInto sets a field from a config value. Strings are taken as they are; everything else is
// JSON (Pulumi hands objects, lists, numbers and booleans over as JSON text). Objects merge into the
// defaults field by field; unknown fields are errors so that a typo never goes unnoticed.
func decodeInto(field reflect.Value, value string) error {
	if field.Kind() == reflect.String {
		field.SetString(value)
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(field.Addr().Interface()); err != nil {
		return fmt.Errorf("cannot read %q as %s: %s", abbreviate(value), describe(field.Type()), strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	}
	return t.String()
}

func abbreviate(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// Keys lists every config key a stack may set (without the namespace), the secret hfToken included.
func Keys() []string {
	var c Config
	return knownKeys(topLevelFields(&c))
}

// IsSecretKey reports whether a key must hold a Pulumi secret.
func IsSecretKey(key string) bool { return key == hfTokenKey }
