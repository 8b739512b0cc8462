package benchmark

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"minimax-m3/config"
)

// stageTrace copies the trace onto the claim when asked, checks the staged trace's SHA-256, and
// counts its requests (lines), as the AIPerf Job does.
func (s *Sweep) stageTrace(ctx context.Context, helper string) (int, error) {
	b := s.Config.Benchmark
	remote := path.Join(config.BenchmarkMountPath, b.TraceFile)
	requests := 0
	err := s.step(ctx, 0, 0, PhaseStage, "trace "+remote, nil, func(ctx context.Context, beat func(string)) error {
		if err := s.copyTrace(ctx, helper, remote, beat); err != nil {
			return err
		}
		var out bytes.Buffer
		if err := s.exec(ctx, helper, []string{"sh", "-c", `wc -l < "$1"`, "sh", remote}, nil, &out); err != nil {
			return fmt.Errorf("counting the trace's requests: %w", err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(out.String()))
		if err != nil {
			return fmt.Errorf("counting the trace's requests: %q", out.String())
		}
		requests = n
		beat(fmt.Sprintf("%d requests", n))
		return nil
	})
	return requests, err
}

// copyTrace stages the local trace when asked, else checks the one on the claim.
func (s *Sweep) copyTrace(ctx context.Context, helper, remote string, beat func(string)) error {
	b := s.Config.Benchmark
	if s.StageTrace != "" {
		sum, size, err := fileSHA256(s.StageTrace)
		if err != nil {
			return err
		}
		if b.TraceSHA256 != "" && sum != b.TraceSHA256 {
			return fmt.Errorf("%s has SHA-256 %s, but benchmark.traceSHA256 is %s: not staging it", s.StageTrace, sum, b.TraceSHA256)
		}
		f, err := os.Open(s.StageTrace)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		beat(fmt.Sprintf("copying %s (%d bytes, SHA-256 %s)", s.StageTrace, size, sum))
		// Written beside the target and renamed only once its checksum matches: a broken copy
		// never replaces a good trace.
		const script = `set -e; mkdir -p "$(dirname "$1")"; cat > "$1.partial"
got=$(sha256sum "$1.partial" | cut -d' ' -f1)
if [ "$got" != "$2" ]; then rm -f "$1.partial"; echo "copied trace has SHA-256 $got, expected $2" >&2; exit 1; fi
mv "$1.partial" "$1"`
		if err := s.exec(ctx, helper, []string{"sh", "-c", script, "sh", remote, sum}, f, io.Discard); err != nil {
			return fmt.Errorf("copying the trace: %w", err)
		}
		return nil
	}
	beat("checking the staged trace")
	var out bytes.Buffer
	if err := s.exec(ctx, helper, []string{"sh", "-c", `test -s "$1" || { echo "no trace at $1: stage it with -trace <local file>" >&2; exit 1; }; sha256sum "$1"`, "sh", remote}, nil, &out); err != nil {
		return err
	}
	got, _, _ := strings.Cut(strings.TrimSpace(out.String()), " ")
	if b.TraceSHA256 != "" && got != b.TraceSHA256 {
		return fmt.Errorf("the trace on the claim (%s) has SHA-256 %s, but benchmark.traceSHA256 is %s: stage the right one with -trace <local file>", remote, got, b.TraceSHA256)
	}
	return nil
}

func fileSHA256(name string) (string, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// writeCheck runs the recipe's artifact write check for this run's directory.
func (s *Sweep) writeCheck(ctx context.Context) error {
	dir := path.Join(config.BenchmarkMountPath, s.Config.Benchmark.ArtifactDirectory, s.RunID)
	name := s.Config.GraphName + "-bench-write-check"
	return s.step(ctx, 0, 0, PhaseWriteCheck, "can the AIPerf Job's user write "+dir+"?", s.describeJob(name), func(ctx context.Context, beat func(string)) error {
		job := AIPerfWriteCheckJob(s.Config, s.Namespace, name, dir)
		job.Labels[RunLabel] = s.RunID
		defer s.cleanup(PhaseWriteCheck, 0, 0, "job", name)
		return s.runJob(ctx, &job, beat)
	})
}

// fetch copies a directory of the claim into a local one, as `kubectl cp` does (tar over exec).
func (s *Sweep) fetch(ctx context.Context, helper, dir, local string) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := s.exec(ctx, helper, []string{"tar", "cf", "-", "-C", dir, "."}, nil, pw)
		_ = pw.CloseWithError(err)
		errc <- err
	}()
	untarErr := untar(pr, local)
	if untarErr == nil {
		// tar pads its stream beyond the end-of-archive marker the reader stops at.
		_, untarErr = io.Copy(io.Discard, pr)
	}
	_ = pr.CloseWithError(untarErr)
	if err := <-errc; err != nil {
		return fmt.Errorf("reading %s on the claim: %w", dir, err)
	}
	return untarErr
}

// untar writes a tar stream's regular files and directories under dir, refusing any path that
// would leave it.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

func findFile(dir, name string) (string, error) {
	var found string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == name && found == "" {
			found = p
		}
		return nil
	})
	if err == nil && found == "" {
		err = fmt.Errorf("no %s in the artifacts copied to %s", name, dir)
	}
	return found, err
}

func (s *Sweep) exec(ctx context.Context, pod string, command []string, stdin io.Reader, stdout io.Writer) error {
	return s.Exec.Exec(ctx, s.Namespace, pod, helperContainer, command, stdin, stdout)
}

// prune deletes the run's artifact directory on the claim: every point's artifacts are in OutDir.
func (s *Sweep) prune(ctx context.Context, helper string) error {
	dir := path.Join(config.BenchmarkMountPath, s.Config.Benchmark.ArtifactDirectory, s.RunID)
	return s.step(ctx, 0, 0, PhasePrune, "deleting "+dir+" on the claim (its artifacts are in "+s.OutDir+")", nil, func(ctx context.Context, _ func(string)) error {
		return s.exec(ctx, helper, []string{"rm", "-rf", dir}, nil, io.Discard)
	})
}
