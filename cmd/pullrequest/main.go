package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"minimax-m3/internal/pullrequest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pullrequest:", err)
		os.Exit(1)
	}
}

// sections is a repeatable -section title=file flag.
type sections []pullrequest.Section

func (s *sections) String() string { return fmt.Sprint(*s) }
func (s *sections) Set(v string) error {
	title, file, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q is not title=file", v)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		b = []byte("(none: " + err.Error() + ")")
	}
	*s = append(*s, pullrequest.Section{Title: title, Text: string(b)})
	return nil
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: pullrequest consent|comment|stack-file [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	pr := fs.Int("pr", 0, "the pull request's number")
	author := fs.String("author", "", "consent: the pull request's author")
	head := fs.String("head", "", "consent: the pull request's head commit (40 hex), the commit consent must be given for")
	labeled := fs.Bool("labeled", false, "consent: the run was started by adding the label (by -sender)")
	sender := fs.String("sender", "", "consent: who started the run")
	reset := fs.Bool("reset", false, "consent: first remove the label (a push: consent is given again for each commit)")
	stack := fs.String("stack", "", "comment: the stack the comment is for")
	title := fs.String("title", "", "comment: its title")
	var parts sections
	fs.Var(&parts, "section", "comment: a folded section, title=file (repeatable)")
	file := fs.String("file", "", "stack-file: the stack file to check")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if args[0] == "stack-file" {
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		return pullrequest.StackFileHoldsNoToken(b)
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
		if *reset {
			if err := pullrequest.Unlabel(ctx, c, *pr); err != nil {
				return err
			}
		}
		if len(*head) != 40 {
			return errors.New("consent needs -head, the pull request's head commit")
		}
		allow, why, err := pullrequest.Consent(ctx, c, *pr, *author, *head, pullrequest.Trigger{Labeled: *labeled, Sender: *sender})
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "roll consent:", why)
		fmt.Println(allow)
		return nil
	case "comment":
		if *stack == "" || *title == "" {
			return errors.New("comment needs -stack and -title")
		}
		body := pullrequest.Body(*title, parts)
		fmt.Print(body) // for the job summary
		return pullrequest.Comment(ctx, c, *pr, *stack, body)
	}
	return fmt.Errorf("unknown command %q: consent, comment or stack-file", args[0])
}
