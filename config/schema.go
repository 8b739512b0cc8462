package config

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"reflect"
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
// (as `pulumi config set` without --path writes it), or a secret ({secure: …}). commentsDir is the
// config package's source directory, for the descriptions ("" leaves them out).
func StackFileSchema(commentsDir string) ([]byte, error) {
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
	for _, d := range root.Definitions {
		acceptStoredForms(d)
	}
	for pair := root.Properties.Oldest(); pair != nil; pair = pair.Next() {
		acceptStoredForms(pair.Value)
	}
	secret := &jsonschema.Schema{Type: "object", Required: []string{"secure"},
		Properties: jsonschema.NewProperties(), AdditionalProperties: jsonschema.FalseSchema,
		Description: "a secret: pulumi config set --secret"}
	secret.Properties.Set("secure", &jsonschema.Schema{Type: "string"})
	keys := jsonschema.NewProperties()
	for pair := root.Properties.Oldest(); pair != nil; pair = pair.Next() {
		value := pair.Value
		var alternatives []*jsonschema.Schema
		if pair.Key == "profile" {
			value.Enum = []any{string(Aggregated), string(Disaggregated)}
		}
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
		keys.Set(Namespace+":"+pair.Key, &jsonschema.Schema{Description: description, AnyOf: append(alternatives, secret)})
	}
	hfToken := &jsonschema.Schema{Description: "the Hugging Face token the model download uses (pulumi config set --secret minimax-m3:hfToken)",
		AnyOf: []*jsonschema.Schema{secret, {Type: "string"}}}
	keys.Set(Key(HFTokenKey), hfToken)
	keys.Set(Key(KubeconfigKey), &jsonschema.Schema{Description: "a kubeconfig's content for the provider and the program's reads of the cluster, instead of the KUBECONFIG file " +
		"(pulumi config set --secret minimax-m3:kubeconfig < kubeconfig.yaml; kubernetes.context picks a context of it)", AnyOf: []*jsonschema.Schema{secret}})
	var known []any
	for pair := keys.Oldest(); pair != nil; pair = pair.Next() {
		known = append(known, pair.Key)
	}
	configSchema := &jsonschema.Schema{Type: "object", Properties: keys,
		// A minimax-m3 key is one of these; other namespaces' keys are anything.
		PropertyNames: &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Enum: known}, {Not: &jsonschema.Schema{Pattern: "^" + Namespace + ":"}}}},
		Description:   "the stack's config: minimax-m3 keys are checked here; other namespaces' keys (kubernetes:, pulumi:) belong to their owners"}
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

// acceptStoredForms lets a number or boolean field take the forms Pulumi stores as the program
// takes them: `--type string` or a hand-edited file gives "3", "0.85" or "true" as strings.
func acceptStoredForms(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	switch s.Type {
	case "integer":
		s.Type, s.AnyOf = "", []*jsonschema.Schema{{Type: "integer"}, {Type: "string", Pattern: `^-?[0-9]+$`}}
	case "number":
		s.Type, s.AnyOf = "", []*jsonschema.Schema{{Type: "number"}, {Type: "string", Pattern: `^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`}}
	case "boolean":
		s.Type, s.AnyOf = "", []*jsonschema.Schema{{Type: "boolean"}, {Type: "string", Enum: []any{"true", "false"}}}
	}
	if s.Properties != nil {
		for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
			acceptStoredForms(pair.Value)
		}
	}
	acceptStoredForms(s.Items)
	if s.AdditionalProperties != nil && s.AdditionalProperties != jsonschema.FalseSchema && s.AdditionalProperties != jsonschema.TrueSchema {
		acceptStoredForms(s.AdditionalProperties)
	}
}
