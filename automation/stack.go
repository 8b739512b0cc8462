// Package automation drives minimax-m3 stacks from Go with the Pulumi Automation API, for a platform
// portal or a test: it runs the same program as `pulumi up`, inline, against a stack's config file.
package automation

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"minimax-m3/components"
)

// ProjectName is the Pulumi project every stack belongs to.
const ProjectName = "minimax-m3"

// Options select a stack and how to run it.
type Options struct {
	// ProjectDir holds Pulumi.yaml and Pulumi.<stack>.yaml. The Automation API writes the stack
	// file (an encryptionsalt, and any Config below), so point it at a working copy, not a checkout
	// you want to keep clean: CopyProject makes one.
	ProjectDir string
	Stack      string
	// Config sets site values before the run, by path (`minimax-m3:namespace.name`), as
	// `pulumi config set --path` does. Mark the token with Secret: true.
	Config auto.ConfigMap
	// EnvVars are passed to the Pulumi CLI and the provider (PULUMI_BACKEND_URL,
	// PULUMI_CONFIG_PASSPHRASE, KUBECONFIG, ...).
	EnvVars map[string]string
}

// Stack creates or selects the stack and applies Options.Config.
func Stack(ctx context.Context, o Options) (auto.Stack, error) {
	s, err := auto.UpsertStackInlineSource(ctx, o.Stack, ProjectName, components.Program,
		auto.WorkDir(o.ProjectDir), auto.EnvVars(o.EnvVars))
	if err != nil {
		return s, fmt.Errorf("stack %s: %w", o.Stack, err)
	}
	if len(o.Config) > 0 {
		if err := s.SetAllConfigWithOptions(ctx, o.Config, &auto.ConfigOptions{Path: true}); err != nil {
			return s, fmt.Errorf("stack %s: setting config: %w", o.Stack, err)
		}
	}
	return s, nil
}

// CopyProject copies the project's Pulumi.yaml and stack files into dir, so runs never rewrite the
// committed files.
func CopyProject(projectDir, dir string) error {
	files, err := filepath.Glob(filepath.Join(projectDir, "Pulumi*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no Pulumi.yaml in %s", projectDir)
	}
	for _, f := range files {
		if err := copyFile(f, filepath.Join(dir, filepath.Base(f))); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
