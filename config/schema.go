package config

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"
)

// SchemaFile is where the stack files' JSON Schema is kept, from the project's root (`go run
// ./cmd/configschema` writes it; a unit test checks it against the Go types).
const SchemaFile = "schema/stack-config.schema.json"

// StackFileSchema is the JSON Schema of a stack file (Pulumi.<stack>.yaml), generated from the Go
// types of Config: every minimax-m3 key with its type and its Go doc comment as description, an
// unknown minimax-m3 key refused (as the program refuses it), other namespaces' keys (kubernetes:,
// pulumi:) left to their owners. A key's value is its object, or that object as a JSON string
// (as `pulumi config set` without --path writes it), in every form the program takes (loosen);
// hfToken and kubeconfig only as secrets ({secure: …}). commentsDir is the
// config package's source directory, for the descriptions ("" leaves them out).
func StackFileSchema(commentsDir string) ([]byte, error) {
	root, err := Schema(commentsDir)
	if err != nil {
		return nil, err
	}
	// Never stricter than the program (decodeValue): every form it takes, the schema takes.
	loosen(reflect.TypeFor[Config](), root, root.Definitions, map[string]bool{})
	secret := &jsonschema.Schema{Type: "object", Required: []string{"secure"},
		Properties: jsonschema.NewProperties(), AdditionalProperties: jsonschema.FalseSchema}
	secret.Properties.Set("secure", &jsonschema.Schema{Type: "string"})
	keys := jsonschema.NewProperties()
	for pair := root.Properties.Oldest(); pair != nil; pair = pair.Next() {
		value := pair.Value
		var alternatives []*jsonschema.Schema
		description := value.Description
		if value.Ref != "" && description == "" {
			description = root.Definitions[strings.TrimPrefix(value.Ref, "#/$defs/")].Description
		}
		switch {
		case value.Ref != "" || value.Type == "object" || value.Type == "array":
			alternatives = []*jsonschema.Schema{value, {Type: "string", Description: "the value as JSON"}}
		default:
			alternatives = []*jsonschema.Schema{value}
		}
		if len(alternatives) == 1 {
			keys.Set(Namespace+":"+pair.Key, value)
			continue
		}
		keys.Set(Namespace+":"+pair.Key, &jsonschema.Schema{Description: description, AnyOf: alternatives})
	}
	// The two secrets, and only they, are secrets ({secure: …}), as the program requires.
	withDescription := func(d string) *jsonschema.Schema {
		c := *secret
		c.Description = d
		return &c
	}
	keys.Set(Key(HFTokenKey), withDescription("the Hugging Face token the model download uses (pulumi config set --secret minimax-m3:hfToken)"))
	keys.Set(Key(KubeconfigKey), withDescription("a kubeconfig's content for the provider and the program's reads of the cluster, instead of the KUBECONFIG file "+
		"(pulumi config set --secret minimax-m3:kubeconfig < kubeconfig.yaml; kubernetes.context picks a context of it)"))
	var known []any
	for pair := keys.Oldest(); pair != nil; pair = pair.Next() {
		known = append(known, pair.Key)
	}
	configSchema := &jsonschema.Schema{Type: "object", Properties: keys,
		// A minimax-m3 key is one of these; other namespaces' keys are anything.
		// A key set without --path (a field's path under a top-level key) is a key too, as the
		// program reads it.
		PropertyNames: &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Enum: known}, {Pattern: dottedKeyPattern()}, {Not: &jsonschema.Schema{Pattern: "^" + Namespace + ":"}}}},
		// Such a key holds a plain value: the two secrets are top-level keys.
		PatternProperties: map[string]*jsonschema.Schema{dottedKeyPattern(): {Not: secret}},
		Description:       "the stack's config: minimax-m3 keys are checked here; other namespaces' keys (kubernetes:, pulumi:) belong to their owners"}
	file := &jsonschema.Schema{
		Version:     jsonschema.Version,
		ID:          "https://minimax-m3.invalid/" + SchemaFile,
		Title:       "minimax-m3 stack file (Pulumi.<stack>.yaml)",
		Type:        "object",
		Properties:  jsonschema.NewProperties(),
		Definitions: root.Definitions,
	}
	file.Properties.Set("config", configSchema)
	for _, k := range []string{"secretsprovider", "encryptedkey", "encryptionsalt"} {
		file.Properties.Set(k, &jsonschema.Schema{Type: "string"})
	}
	file.Properties.Set("environment", &jsonschema.Schema{Description: "the ESC environments the stack imports"})
	file.AdditionalProperties = jsonschema.FalseSchema
	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// dottedKeyPattern matches a key set without --path: a top-level key and a field path under it.
func dottedKeyPattern() string {
	var tops []string
	for k := range structFields(reflect.TypeFor[Config]()) {
		tops = append(tops, regexp.QuoteMeta(k))
	}
	slices.Sort(tops)
	return "^" + Namespace + ":(" + strings.Join(tops, "|") + ")" + `(\.[A-Za-z][A-Za-z0-9]*)+$`
}

// Schema is the JSON Schema of Config as the Go types give it (every top-level key a property, each
// struct type a definition, the Go doc comments from the config package's source directory
// commentsDir as descriptions; "" leaves them out), before the stack file's loosening: what the
// package schema is made from.
func Schema(commentsDir string) (*jsonschema.Schema, error) {
	r := &jsonschema.Reflector{
		ExpandedStruct:            true,
		AllowAdditionalProperties: false,
		DoNotReference:            false,
		// Every field is optional: the program's defaults (Defaults) fill what a stack leaves out.
		RequiredFromJSONSchemaTags: true,
		Namer:                      func(t reflect.Type) string { return t.Name() },
	}
	if commentsDir != "" {
		// The comments are keyed by import path joined with each file's directory: read them
		// under a stand-in base, then key them by this package's path, wherever dir is.
		read := &jsonschema.Reflector{}
		if err := read.AddGoComments("_", commentsDir); err != nil {
			return nil, fmt.Errorf("reading the config package's comments: %w", err)
		}
		prefix := path.Join("_", filepath.ToSlash(filepath.Clean(commentsDir)))
		r.CommentMap = map[string]string{}
		for k, v := range read.CommentMap {
			if rest, ok := strings.CutPrefix(k, prefix); ok {
				r.CommentMap["minimax-m3/config"+rest] = v
			}
		}
	}
	root := r.Reflect(&Config{})
	// The closed choices, from the one table the validation uses.
	for _, c := range Choices {
		owner := root
		if c.Owner != reflect.TypeFor[Config]() {
			owner = root.Definitions[c.Owner.Name()]
		}
		if owner == nil {
			return nil, fmt.Errorf("choice %s: no definition of %s", c.Name, c.Owner.Name())
		}
		p, ok := owner.Properties.Get(c.Field)
		if !ok {
			return nil, fmt.Errorf("choice %s: %s has no field %s", c.Name, c.Owner.Name(), c.Field)
		}
		p.Enum = nil
		if c.Unset {
			p.Enum = append(p.Enum, "")
		}
		for _, v := range c.Values {
			p.Enum = append(p.Enum, v)
		}
	}
	return root, nil
}

// loosen makes the schema of struct type t (s, its properties; defs, the shared definitions) take
// every form decodeValue takes: `pulumi config set --path` stores a digit-only value as a number
// and true/false as booleans, `--type` and hand-edited files any JSON type, `--path key null`
// the text "null" and `--path key '[]'` a list as JSON text. So a string field takes a number or a
// boolean; a number field a number or a string holding one; a boolean field a boolean or its text;
// a pointer field null or "null" as well; a list its JSON text; a map value null (which removes a
// default entry).
func loosen(t reflect.Type, s *jsonschema.Schema, defs jsonschema.Definitions, done map[string]bool) {
	if s.Ref != "" {
		name := strings.TrimPrefix(s.Ref, "#/$defs/")
		if done[name] || defs[name] == nil {
			return
		}
		done[name] = true
		s = defs[name]
	}
	if s.Properties == nil {
		return
	}
	fields := structFields(t)
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		i, ok := fields[pair.Key]
		if !ok {
			continue
		}
		pair.Value = loosenField(t.Field(i).Type, pair.Value, defs, done)
		s.Properties.Set(pair.Key, pair.Value)
	}
}

// loosenField is a field's schema, of Go type t, taking every form decodeValue takes.
func loosenField(t reflect.Type, s *jsonschema.Schema, defs jsonschema.Definitions, done map[string]bool) *jsonschema.Schema {
	nullable := t.Kind() == reflect.Pointer
	if nullable {
		t = t.Elem()
	}
	var forms []*jsonschema.Schema
	switch t.Kind() {
	case reflect.String:
		forms = []*jsonschema.Schema{{Type: "string"}, {Type: "number"}, {Type: "boolean"}}
	case reflect.Int, reflect.Int64:
		forms = []*jsonschema.Schema{{Type: "integer"}, {Type: "string", Pattern: `^\s*[-+]?[0-9]+\s*$`}}
	case reflect.Float64:
		forms = []*jsonschema.Schema{{Type: "number"}, {Type: "string", Pattern: `^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$`}}
	case reflect.Bool:
		forms = []*jsonschema.Schema{{Type: "boolean"}, {Type: "string", Pattern: `^\s*([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])\s*$`}}
	case reflect.Slice:
		if s.Items != nil {
			s.Items = loosenField(t.Elem(), s.Items, defs, done)
		}
		forms = []*jsonschema.Schema{s, {Type: "string", Pattern: `^\s*\[`, Description: "the list as JSON text"}}
	case reflect.Map:
		if s.AdditionalProperties != nil {
			s.AdditionalProperties = &jsonschema.Schema{AnyOf: []*jsonschema.Schema{loosenField(t.Elem(), s.AdditionalProperties, defs, done), {Type: "null"}}}
		}
		forms = []*jsonschema.Schema{s}
	case reflect.Struct:
		loosen(t, s, defs, done)
		forms = []*jsonschema.Schema{s}
	default:
		forms = []*jsonschema.Schema{s}
	}
	if nullable {
		forms = append(forms, &jsonschema.Schema{Type: "null"}, &jsonschema.Schema{Type: "string", Pattern: `^\s*null\s*$`})
	}
	if len(forms) == 1 {
		return forms[0]
	}
	out := &jsonschema.Schema{AnyOf: forms, Description: s.Description, Enum: s.Enum}
	for _, f := range forms {
		if f == s {
			f.Description = ""
		}
	}
	return out
}
