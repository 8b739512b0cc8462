package portal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"minimax-m3/automation"
)

// Interruption is what an operation that did not end left on a stack: the backend's lock (its
// process killed before it could release it) and operations pending in the state (a resource's
// create, update or delete the engine had started). Either blocks or misleads the next update.
type Interruption struct {
	Stack string `json:"stack"`
	// Locks are the backend's locks on the stack (read for a file backend, where a killed CLI
	// leaves its lock file).
	Locks []Lock `json:"locks,omitempty"`
	// Pending are the pending operations, "<type> <urn>".
	Pending []string `json:"pending,omitempty"`
}

// Lock is one lock on a stack, as the file backend writes it.
type Lock struct {
	Pid      int       `json:"pid"`
	Username string    `json:"username"`
	Hostname string    `json:"hostname"`
	Since    time.Time `json:"since"`
	// Stale: the lock's process ran on this host and runs no more, so no update holds it.
	Stale bool `json:"stale"`
}

// Recoverable says whether Recover may clear the interruption: every lock is stale.
func (i Interruption) Recoverable() bool {
	for _, l := range i.Locks {
		if !l.Stale {
			return false
		}
	}
	return true
}

// Interruptions finds the stacks an operation left locked or with pending operations: what a
// portal killed mid-update (or a CLI killed on this host) leaves behind. The portal checks at
// start; nothing is changed until Recover.
func (m *Manager) Interruptions(ctx context.Context) ([]Interruption, error) {
	names, err := m.Stacks(ctx)
	if err != nil {
		return nil, err
	}
	var out []Interruption
	for _, name := range names {
		if m.Running(name) != "" {
			continue
		}
		in, err := m.interruption(ctx, name)
		if err != nil {
			return out, err
		}
		if len(in.Locks) > 0 || len(in.Pending) > 0 {
			out = append(out, in)
		}
	}
	return out, nil
}

func (m *Manager) interruption(ctx context.Context, stack string) (Interruption, error) {
	in := Interruption{Stack: stack}
	locks, err := m.locks(stack)
	if err != nil {
		return in, err
	}
	in.Locks = locks
	s, err := m.open(ctx, stack, false)
	if err != nil {
		return in, err
	}
	if in.Pending, err = automation.PendingOperations(ctx, s.Stack); err != nil {
		return in, m.opError(stack, err, "")
	}
	return in, nil
}

// locks reads the stack's lock files when the backend is a file backend
// (<backend>/.pulumi/locks/organization/<project>/<stack>/*.json); other backends keep their
// locks themselves and report none here.
func (m *Manager) locks(stack string) ([]Lock, error) {
	u, err := url.Parse(m.o.BackendURL)
	if err != nil || u.Scheme != "file" {
		return nil, nil
	}
	dir := filepath.Join(u.Path, ".pulumi", "locks", "organization", automation.ProjectName, stack)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	var out []Lock
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var c struct {
			Pid       int       `json:"pid"`
			Username  string    `json:"username"`
			Hostname  string    `json:"hostname"`
			Timestamp time.Time `json:"timestamp"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("lock %s: %w", e.Name(), err)
		}
		out = append(out, Lock{Pid: c.Pid, Username: c.Username, Hostname: c.Hostname, Since: c.Timestamp,
			Stale: c.Hostname == host && !processRuns(c.Pid)})
	}
	return out, nil
}

// processRuns says whether a process of this host runs: /proc has it and it is not a zombie (a
// killed CLI whose parent died too may stay one, unreaped); without /proc, signal 0 reaches it.
func processRuns(pid int) bool {
	if pid <= 0 {
		return false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// "pid (comm) state …": the state follows the last ')'.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
	} else if _, err := os.Stat("/proc/self"); err == nil {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Recover clears what an interrupted operation left on a stack: its stale locks (`pulumi
// cancel`, which on a file backend deletes the stack's lock files) and its pending operations
// (interrupted creations imported from the cluster, the rest dropped, as after a cancelled up).
// It refuses while a lock belongs to a process that may still run (another host's, or a live one
// here): that update is not interrupted, and cancelling it is its owner's call.
func (m *Manager) Recover(ctx context.Context, stack string, o RunOptions) (Interruption, error) {
	ctx, err := m.actingAs(ctx, o)
	if err != nil {
		return Interruption{}, err
	}
	ctx, release, err := m.acquire(ctx, stack, "recover", o.Wait)
	if err != nil {
		return Interruption{}, err
	}
	defer release()
	in, err := m.interruption(ctx, stack)
	if err != nil {
		return in, err
	}
	for _, l := range in.Locks {
		if !l.Stale {
			return in, &BusyError{Stack: stack, Operation: fmt.Sprintf("an update of %s@%s (pid %d, since %s)", l.Username, l.Hostname, l.Pid, l.Since.Format(time.RFC3339))}
		}
	}
	progress := func(msg string) {
		if o.Progress != nil {
			o.Progress(Event{Time: time.Now(), Stack: stack, Status: "recover", Message: msg})
		}
	}
	s, err := m.open(ctx, stack, false)
	if err != nil {
		return in, err
	}
	if len(in.Locks) > 0 {
		progress(fmt.Sprintf("removing %d stale lock(s) (pulumi cancel)", len(in.Locks)))
		if err := s.Cancel(ctx); err != nil {
			return in, m.opError(stack, err, "")
		}
	}
	if len(in.Pending) > 0 {
		progress(fmt.Sprintf("clearing %d pending operation(s): %s", len(in.Pending), strings.Join(in.Pending, ", ")))
		if err := m.clearPending(ctx, s); err != nil {
			return in, m.opError(stack, err, "")
		}
	}
	progress("recovered: the stack is ready for its next update")
	return in, nil
}
