package rackbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one control-plane binary the box runs, its output kept for failure reports.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
	err  error
}

func startProcess(name, binary string, args []string, log io.Writer) (*process, error) {
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("%s is not built: run `make toolchain` (%w)", name, err)
	}
	p := &process{name: name, out: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	var w io.Writer = p.out
	if log != nil {
		w = io.MultiWriter(p.out, log)
	}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	// Its own process group, so a Ctrl-C of the test run reaches the box's Stop, not each server.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, fmt.Errorf("%s exited: %v; its last output:\n%s", p.name, p.err, p.out.String())
	default:
		return false, nil
	}
}

// stop ends the process: SIGTERM, then SIGKILL after a grace period.
func (p *process) stop() {
	if ok, _ := p.exited(); ok {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
