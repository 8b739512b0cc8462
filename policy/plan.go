package policy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"gopkg.in/yaml.v3"
)

// Step is what a preview or an update does to one resource.
type Step struct {
	URN  string
	Type string // the Pulumi type token, e.g. kubernetes:batch/v1:Job
	Name string // the logical name
	// Op is the engine's operation: same, create, update, replace, create-replacement,
	// delete-replaced, delete, read, ...
	Op string
	// Old and New are the resource's inputs before and after (nil when it does not exist on that
	// side). Secret values arrive masked.
	Old, New map[string]any
	// Retained is true when deleting the resource only removes it from the stack (retainOnDelete).
	Retained bool
	// Diffs are the input paths the engine reports as changed (its detailed diff where the
	// provider gives one).
	Diffs []string
}

// Plan is the steps of one preview of one stack.
type Plan struct {
	Steps []Step
	// Adopted is true when the stack took over objects it did not create (config `adopt`): every
	// Kubernetes object of the stack is then protected from replacement and deletion.
	Adopted bool
	// ImageRegistries are the registries (or repository prefixes) images may come from (rule
	// allowed-registries); empty: config.DefaultImageRegistries. Give the site's list, never one a
	// change under review could have set.
	ImageRegistries []string
	// PriorityClasses are the priority classes the site allows (rule pod-security); empty allows
	// none. Give the site's list, never one a change under review could have set.
	PriorityClasses []string
}

// StepFromEvent turns an engine event into a Step; ok is false for events that are not a
// resource's step.
func StepFromEvent(e events.EngineEvent) (Step, bool) {
	if e.ResourcePreEvent == nil {
		return Step{}, false
	}
	m := e.ResourcePreEvent.Metadata
	s := Step{URN: m.URN, Type: m.Type, Op: string(m.Op), Name: m.URN[strings.LastIndex(m.URN, "::")+2:]}
	if m.Old != nil {
		s.Old = m.Old.Inputs
		s.Retained = m.Old.RetainOnDelete
	}
	if m.New != nil {
		s.New = m.New.Inputs
	}
	if len(m.DetailedDiff) > 0 {
		for k := range m.DetailedDiff {
			s.Diffs = append(s.Diffs, k)
		}
	} else {
		s.Diffs = append(s.Diffs, m.Diffs...)
	}
	sort.Strings(s.Diffs)
	return s, true
}

// Collect reads an engine event stream (optpreview.EventStreams, optup.EventStreams) until it is
// closed and returns its steps. Run it in its own goroutine, before the operation starts.
func Collect(ch <-chan events.EngineEvent) []Step {
	var steps []Step
	for e := range ch {
		if s, ok := StepFromEvent(e); ok {
			steps = append(steps, s)
		}
	}
	return steps
}

// ReadEventLog reads the steps of `pulumi preview --event-log <file>` (one engine event per line).
func ReadEventLog(r io.Reader) ([]Step, error) {
	var steps []Step
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		var e apitype.EngineEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("event log line %d: %w", n, err)
		}
		if s, ok := StepFromEvent(events.EngineEvent{EngineEvent: e}); ok {
			steps = append(steps, s)
		}
	}
	return steps, sc.Err()
}

// Changed reports whether a step changes anything.
func (s Step) Changed() bool { return s.Op != "same" && s.Op != "read" && s.Op != "refresh" }

// Replaces reports whether the step replaces the live object.
func (s Step) Replaces() bool {
	switch s.Op {
	case "replace", "create-replacement", "delete-replaced", "discard-replaced", "import-replacement":
		return true
	}
	return false
}

// Deletes reports whether the step deletes the live object (not a retained one).
func (s Step) Deletes() bool { return s.Op == "delete" && !s.Retained }

// Kind is the Kubernetes kind of a step's resource ("" for other resources).
func (s Step) Kind() string {
	if !strings.HasPrefix(s.Type, "kubernetes:") || strings.HasPrefix(s.Type, "kubernetes:index:") {
		return ""
	}
	return s.Type[strings.LastIndex(s.Type, ":")+1:]
}

// inputs are the step's inputs after the change, or before it for a deletion.
func (s Step) inputs() map[string]any {
	if s.New != nil {
		return s.New
	}
	return s.Old
}

// objectName is "Kind namespace/name" of a Kubernetes object, for messages.
func (s Step) objectName() string {
	meta, _ := s.inputs()["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		return s.Kind() + " " + s.Name
	}
	if ns, _ := meta["namespace"].(string); ns != "" {
		name = ns + "/" + name
	}
	return s.Kind() + " " + name
}

// at walks a path of map keys.
func at(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// StackFileAdopts reads `adopt` from a stack file (Pulumi.<stack>.yaml): whether the stack took
// over objects it did not create, which Plan.Adopted protects. A stack that does not set it takes
// what the project file beside it (Pulumi.yaml) gives `adopt`: a value, or a declared default; one
// that imports an ESC environment must set it (the environment may, unseen here).
func StackFileAdopts(path string) (bool, error) {
	var file struct {
		Config      map[string]any `yaml:"config"`
		Environment any            `yaml:"environment"`
	}
	if err := readYAML(path, &file); err != nil {
		return false, err
	}
	if v, ok := file.Config["minimax-m3:adopt"]; ok {
		return adopts(v), nil
	}
	if file.Environment != nil {
		// An environment the stack imports may set it, and no file here says what it holds.
		return false, fmt.Errorf("%s imports an ESC environment and does not set minimax-m3:adopt: set it in the stack file (true or false), so that the policies know whether the stack adopted objects", path)
	}
	var project struct {
		Config map[string]any `yaml:"config"`
	}
	found := false
	for _, name := range []string{"Pulumi.yaml", "Pulumi.yml"} {
		err := readYAML(filepath.Join(filepath.Dir(path), name), &project)
		if err == nil {
			found = true
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	if !found {
		return false, nil
	}
	for _, k := range []string{"adopt", "minimax-m3:adopt"} {
		switch v := project.Config[k].(type) {
		case map[string]any:
			if value, ok := v["value"]; ok {
				return adopts(value), nil
			}
			return adopts(v["default"]), nil
		case nil:
		default:
			return adopts(v), nil
		}
	}
	return false, nil
}

func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// adopts reads a value of `adopt` as the program does.
func adopts(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return strings.EqualFold(strings.TrimSpace(v), "true")
	}
	return false
}
