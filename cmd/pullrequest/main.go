package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"minimax-m3/internal/pullrequest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pullrequest:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: pullrequest consent|comment [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	pr := fs.Int("pr", 0, "the pull request's number")
	author := fs.String("author", "", "consent: the pull request's author")
	stack := fs.String("stack", "", "comment: the stack the comment is for")
	bodyFile := fs.String("body", "", "comment: the file holding the comment")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	api := os.Getenv("GITHUB_API_URL")
	if api == "" {
		api = "https://api.github.com"
	}
	c := &pullrequest.Client{API: api, Token: os.Getenv("GH_TOKEN"), Repo: os.Getenv("GITHUB_REPOSITORY")}
	if c.Repo == "" || *pr <= 0 {
		return errors.New("GITHUB_REPOSITORY and -pr are required")
	}
	ctx := context.Background()
	switch args[0] {
	case "consent":
		allow, why, err := pullrequest.Consent(ctx, c, *pr, *author)
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "roll consent:", why)
		fmt.Println(allow)
		return nil
	case "comment":
		if *stack == "" || *bodyFile == "" {
			return errors.New("comment needs -stack and -body")
		}
		b, err := os.ReadFile(*bodyFile)
		if err != nil {
			return err
		}
		return pullrequest.Comment(ctx, c, *pr, *stack, string(b))
	}
	return fmt.Errorf("unknown command %q: consent or comment", args[0])
}
