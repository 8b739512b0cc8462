package automation

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"gopkg.in/yaml.v3"

	"minimax-m3/components"
	"minimax-m3/policy"
)

// RenderOptions select what to render and where.
type RenderOptions struct {
	ProjectDir string // the project checkout (read, never written)
	Stack      string
	OutDir     string
	// Config adds or overrides values by path, as `pulumi config set --path` does.
	Config auto.ConfigMap
	// HFToken, when set, is rendered into the token Secret in plain text. When empty the render
	// expects the Secret to exist in the cluster (huggingFace.existingSecret) and renders none.
	HFToken string
	// Progress receives the engine's output; nil discards it.
	Progress io.Writer
	// Steps, when set, receives every resource's step of the render (all creates), for the policy
	// checks.
	Steps *[]policy.Step
}

// Render writes every object the stack would apply as YAML into OutDir (CRDs under 0-crd/,
// everything else under 1-manifest/), with no cluster, like `kustomize build`. It runs on a fresh
// stack in a throwaway backend, so every file is written every time. The stack file's
// secrets (encrypted for its own backend) are not carried over.
func Render(ctx context.Context, o RenderOptions) error {
	work, err := os.MkdirTemp("", "minimax-m3-render")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	if err := CopyProject(o.ProjectDir, work); err != nil {
		return err
	}
	if err := stripSecrets(filepath.Join(work, "Pulumi."+o.Stack+".yaml")); err != nil {
		return err
	}
	out, err := filepath.Abs(o.OutDir)
	if err != nil {
		return err
	}
	cfg := auto.ConfigMap{}
	if o.HFToken != "" {
		cfg["minimax-m3:hfToken"] = auto.ConfigValue{Value: o.HFToken, Secret: true}
	} else {
		cfg["minimax-m3:huggingFace.existingSecret"] = auto.ConfigValue{Value: "true"}
	}
	for k, v := range o.Config {
		cfg[k] = v
	}
	s, err := NewStack(ctx, Options{
		ProjectDir: work,
		Stack:      o.Stack,
		Config:     cfg,
		EnvVars: map[string]string{
			"PULUMI_BACKEND_URL":       "file://" + filepath.ToSlash(work),
			"PULUMI_CONFIG_PASSPHRASE": "render",
		},
		Program: components.Options{RenderDirectory: out},
	})
	if err != nil {
		return err
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	opts := []optup.Option{optup.ProgressStreams(progress), optup.ErrorProgressStreams(progress)}
	var collected chan []policy.Step
	if o.Steps != nil {
		ch := make(chan events.EngineEvent)
		collected = make(chan []policy.Step, 1)
		go func() { collected <- policy.Collect(ch) }()
		opts = append(opts, optup.EventStreams(ch))
	}
	_, err = s.Up(ctx, opts...)
	if collected != nil {
		*o.Steps = <-collected
	}
	if err != nil {
		return fmt.Errorf("rendering stack %s: %w", o.Stack, err)
	}
	return nil
}

// stripSecrets drops the stack file's secrets and its secrets-provider settings: they belong to the
// user's own backend and cannot be decrypted by the throwaway one.
func stripSecrets(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var file map[string]any
	if err := yaml.Unmarshal(b, &file); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, k := range []string{"encryptionsalt", "secretsprovider", "encryptedkey"} {
		delete(file, k)
	}
	if cfg, ok := file["config"].(map[string]any); ok {
		for k, v := range cfg {
			if m, ok := v.(map[string]any); ok && m["secure"] != nil || strings.HasSuffix(k, ":hfToken") {
				delete(cfg, k)
			}
		}
	}
	out, err := yaml.Marshal(file)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
