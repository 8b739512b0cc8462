package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"minimax-m3/automation"
)

type settings auto.ConfigMap

func (s settings) String() string { return "" }

func (s settings) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q is not key=value", v)
	}
	s[k] = auto.ConfigValue{Value: val}
	return nil
}

func main() {
	set := settings{}
	stack := flag.String("stack", "", "stack to render: agg or disagg")
	out := flag.String("out", "", "directory to write the manifests to (outside the repository)")
	project := flag.String("project", ".", "the project directory")
	inRepo := flag.Bool("allow-in-repo", false, "allow writing inside the project directory")
	flag.Var(set, "set", "config value by path, key=value (repeatable)")
	flag.Parse()
	if err := run(*stack, *out, *project, *inRepo, auto.ConfigMap(set)); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(stack, out, project string, inRepo bool, set auto.ConfigMap) error {
	if stack == "" || out == "" {
		return fmt.Errorf("-stack and -out are required")
	}
	absOut, _ := filepath.Abs(out)
	absProject, _ := filepath.Abs(project)
	if rel, err := filepath.Rel(absProject, absOut); err == nil && !strings.HasPrefix(rel, "..") && !inRepo {
		return fmt.Errorf("%s is inside the project: rendered manifests carry site values (and, with HF_TOKEN, the token in plain text); choose a directory outside it or pass -allow-in-repo", out)
	}
	token := os.Getenv("HF_TOKEN")
	if token != "" {
		fmt.Fprintln(os.Stderr, "render: WARNING: HF_TOKEN is set, so the rendered Secret holds it in plain text; keep", out, "private")
	} else {
		fmt.Fprintln(os.Stderr, "render: no HF_TOKEN: the download Job reads the Secret named by huggingFace.secretName, which must exist in the cluster; no Secret is rendered")
	}
	err := automation.Render(context.Background(), automation.RenderOptions{
		ProjectDir: project, Stack: stack, OutDir: out, Config: set, HFToken: token, Progress: os.Stderr,
	})
	if err != nil {
		return err
	}
	fmt.Println(absOut)
	return nil
}
