package pulumipackage

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"

	"minimax-m3/config"
	"minimax-m3/teamboundary"
)

const (
	// Name is the package's name: its type tokens start with it.
	Name = "minimax-m3"
	// Version is the package's version, which the plugin reports.
	Version = "0.1.0"
	// DeploymentToken is the Deployment component's type token, the one the program registers.
	DeploymentToken = Name + ":index:Deployment"
	// SchemaFile is where the schema is kept, from the project's root: the plugin embeds it.
	SchemaFile = "provider/schema.json"
)

// The Deployment's secret inputs beside the config keys (config.HFTokenKey, config.KubeconfigKey).
var secretInputs = map[string]string{
	config.HFTokenKey: "The Hugging Face token the model download uses (a secret). Leave it out when " +
		"huggingFace.existingSecret names a Secret already in the namespace.",
	config.KubeconfigKey: "A kubeconfig's content (a secret) the component reads the cluster with and, " +
		"without a Kubernetes provider in its options, makes its own provider from; kubernetes.context picks a " +
		"context of it. Left out: the KUBECONFIG the engine runs with.",
}

// outputs are the Deployment's outputs: the program's stack outputs.
var outputs = map[string]struct{ typ, description string }{
	"namespace":            {"string", "The namespace the graph runs in."},
	"graphName":            {"string", "The DynamoGraphDeployment's name."},
	"frontendService":      {"string", "The frontend's Service (OpenAI-compatible API)."},
	"frontendPort":         {"integer", "The frontend Service's port."},
	"frontendUrl":          {"string", "The frontend's URL inside the cluster."},
	"portForwardCommand":   {"string", "A kubectl command that forwards the frontend to localhost."},
	"smokeTestModels":      {"string", "A curl command listing the served models through the port-forward."},
	"smokeTestChat":        {"string", "A curl command sending one chat completion through the port-forward."},
	"gpuCount":             {"integer", "The GPUs the workers hold."},
	"model":                {"string", "The Hugging Face model served."},
	"servedModelName":      {"string", "The model name clients send."},
	"modelRevision":        {"string", "The model's pinned revision."},
	"draftModel":           {"string", "The EAGLE3 draft model."},
	"draftRevision":        {"string", "The draft model's pinned revision."},
	"speculativeMode":      {"string", "The speculative decoding mode (eagle3, synthetic or off)."},
	"computeDomain":        {"string", "The ComputeDomain the workers' channel claims name."},
	"channelClaimTemplate": {"string", "The ResourceClaimTemplate of the workers' IMEX channel."},
	"cacheClaimName":       {"string", "The model cache's PersistentVolumeClaim."},
	"graphReadyGeneration": {"integer", "The graph's generation this update saw Ready."},
	"waitCommand":          {"string", "A kubectl command that waits for the graph to be Ready."},
	"smokeTest":            {"object", "The smoke test's result (status, latencyMs, reply), when it runs."},
	"externalUrl":          {"string", "Where clients reach the model through the site's Gateway, when exposure is enabled."},
	"graphs": {"array", "Each graph of a deployment of several (scaleOut.graphs above 1): name, frontendService, frontendUrl, " +
		"computeDomain, channelClaimTemplate, readyGeneration and smokeTest."},
	"frontendUrls": {"array", "Every graph's frontend URL inside the cluster, when scaleOut.graphs is above 1."},
}

// optionalOutputs are outputs only some configurations have.
var optionalOutputs = []string{"smokeTest", "externalUrl", "graphs", "frontendUrls"}

// Schema is the package's schema: the Deployment component, whose inputs are the config keys a
// stack sets (the same names, types and descriptions, every one optional: the profile's defaults
// fill the rest) and the two secrets, and whose outputs are the program's stack outputs. Each
// struct type of the config is an object type of the package. commentsDir is the config package's
// source directory, for the descriptions.
func Schema(commentsDir string) ([]byte, error) {
	root, err := config.Schema(commentsDir)
	if err != nil {
		return nil, err
	}
	types := map[string]any{}
	for name, def := range root.Definitions {
		if def.Properties == nil {
			continue // a free-form object (a patch): typed as Any where used
		}
		types[typeToken(name)] = map[string]any{
			"type":        "object",
			"description": def.Description,
			"properties":  properties(def, root.Definitions),
		}
	}
	inputs := properties(root, root.Definitions)
	if p, ok := inputs["profile"].(map[string]any); ok {
		p["description"] = fmt.Sprintf("The serving profile: %q (frontend and TP4 workers) or %q (frontend, prefill and decode workers).",
			config.Aggregated, config.Disaggregated)
	}
	// The closed choices as enum types, from the table the validation uses (an input left unset
	// takes the default, so an enum holds the choices only).
	for _, c := range config.Choices {
		props := inputs
		if c.Owner != reflect.TypeFor[config.Config]() {
			owner, _ := types[typeToken(c.Owner.Name())].(map[string]any)
			props, _ = owner["properties"].(map[string]any)
		}
		p, ok := props[c.Field].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("choice %s: %s has no field %s in the package schema", c.Name, c.Owner.Name(), c.Field)
		}
		delete(p, "type")
		p["$ref"] = "#/types/" + typeToken(c.Name)
		var values []any
		for _, v := range c.Values {
			values = append(values, map[string]any{"value": v})
		}
		types[typeToken(c.Name)] = map[string]any{"type": "string", "enum": values, "description": sentence(c.Why)}
	}
	for k, d := range secretInputs {
		inputs[k] = map[string]any{"type": "string", "secret": true, "description": d}
	}
	props := map[string]any{}
	var required []string
	for k, o := range outputs {
		p := map[string]any{"type": o.typ, "description": o.description}
		switch o.typ {
		case "object":
			p = map[string]any{"type": "object", "additionalProperties": map[string]any{"$ref": "pulumi.json#/Any"}, "description": o.description}
		case "array":
			p = map[string]any{"type": "array", "items": map[string]any{"$ref": "pulumi.json#/Any"}, "description": o.description}
		}
		props[k] = p
		if !slices.Contains(optionalOutputs, k) {
			required = append(required, k)
		}
	}
	slices.Sort(required)
	spec := map[string]any{
		"name":        Name,
		"displayName": "MiniMax M3 on NVIDIA Dynamo",
		"version":     Version,
		"description": "MiniMax M3 NVFP4 served by NVIDIA Dynamo and vLLM on Kubernetes GB200 NVL72 racks, as one component.",
		"keywords":    []string{"kubernetes", "nvidia", "dynamo", "vllm", "gb200", "kind/component", "category/infrastructure"},
		"resources": map[string]any{
			DeploymentToken: map[string]any{
				"isComponent": true,
				"description": "A MiniMax M3 deployment: namespace, Hugging Face token Secret, model cache and its download, " +
					"ComputeDomain, the DynamoGraphDeployment and its smoke test. Its inputs are the program's config keys; " +
					"they must be known when it is previewed (they decide which objects exist, and are checked against the " +
					"cluster before any is touched). Pass a Kubernetes provider in its options, or it makes its own. One per stack: " +
					"the stack's identity marks its objects.",
				"inputProperties": inputs,
				// What the program requires of every stack: the profile and the namespace's name.
				"requiredInputs": []string{"namespace", "profile"},
				"properties":     props,
				"required":       required,
			},
			teamboundary.SiteToken: siteResource(),
		},
		"types": types,
		"language": map[string]any{
			"go": map[string]any{"importBasePath": "minimax-m3/sdk/go/minimaxm3", "generateResourceContainerTypes": true},
		},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// properties translates the properties of a JSON Schema object into the package schema's.
func properties(s *jsonschema.Schema, defs jsonschema.Definitions) map[string]any {
	out := map[string]any{}
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		p := propertyType(pair.Value, defs)
		description := pair.Value.Description
		if description == "" && pair.Value.Ref != "" {
			if def := defs[defName(pair.Value.Ref)]; def != nil {
				description = def.Description
			}
		}
		if description != "" {
			p["description"] = description
		}
		out[pair.Key] = p
	}
	return out
}

// propertyType is one property's type in the package schema.
func propertyType(s *jsonschema.Schema, defs jsonschema.Definitions) map[string]any {
	switch {
	case s.Ref != "":
		if def := defs[defName(s.Ref)]; def == nil || def.Properties == nil {
			return map[string]any{"$ref": "pulumi.json#/Any"}
		}
		return map[string]any{"$ref": "#/types/" + typeToken(defName(s.Ref))}
	case s.Type == "array" && s.Items != nil:
		return map[string]any{"type": "array", "items": propertyType(s.Items, defs)}
	case s.Type == "object" && s.AdditionalProperties != nil && s.AdditionalProperties != jsonschema.FalseSchema && s.AdditionalProperties != jsonschema.TrueSchema:
		return map[string]any{"type": "object", "additionalProperties": propertyType(s.AdditionalProperties, defs)}
	case s.Type == "string" || s.Type == "integer" || s.Type == "number" || s.Type == "boolean":
		return map[string]any{"type": s.Type}
	}
	return map[string]any{"$ref": "pulumi.json#/Any"}
}

func defName(ref string) string { return strings.TrimPrefix(ref, "#/$defs/") }

func typeToken(name string) string { return Name + ":index:" + name }

// sentence makes a phrase a sentence: its first letter upper case (unless it is a name that starts
// lower case, as vLLM does) and a full stop.
func sentence(s string) string {
	if s != "" && !strings.HasPrefix(s, "vLLM") {
		s = strings.ToUpper(s[:1]) + s[1:]
	}
	return s + "."
}
