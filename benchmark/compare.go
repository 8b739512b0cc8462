package benchmark

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Compare puts two or more sweeps side by side (agg against disagg, real against synthetic
// acceptance, before against after a change): one table (compare.csv, compare.md) with a row per
// sweep and point, and one plot (compare.svg) with a line per sweep, throughput per GPU so sweeps
// on different GPU counts compare. Each sweep is read from its output directory's sweep.json.
func Compare(dirs []string, out string) ([]string, error) {
	if len(dirs) < 2 {
		return nil, fmt.Errorf("compare: give at least two sweep directories")
	}
	var series []Series
	labels := map[string]string{}
	for _, dir := range dirs {
		m, err := LoadMetadata(dir)
		if err != nil {
			return nil, fmt.Errorf("compare: %w", err)
		}
		if len(m.Points) == 0 {
			return nil, fmt.Errorf("compare: the sweep in %s has no points", dir)
		}
		s := m.Series()
		if other, ok := labels[s.Label]; ok {
			return nil, fmt.Errorf("compare: %s and %s hold the same sweep (%s)", other, dir, s.Label)
		}
		labels[s.Label] = dir
		if !m.Complete {
			s.Label += " [incomplete]"
		}
		series = append(series, s)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var names []string
	for _, s := range series {
		names = append(names, s.Label)
	}
	title := "output tokens/s per GPU: " + strings.Join(names, " vs ")
	var files []string
	for _, w := range []struct {
		name string
		f    func(io.Writer) error
	}{
		{"compare.csv", func(w io.Writer) error { return WriteCSV(w, series...) }},
		{"compare.md", func(w io.Writer) error { return WriteMarkdown(w, series...) }},
		{"compare.svg", func(w io.Writer) error { return WriteSVG(w, title, series...) }},
	} {
		var buf bytes.Buffer
		if err := w.f(&buf); err != nil {
			return files, err
		}
		p := filepath.Join(out, w.name)
		if err := writeFileAtomic(p, buf.Bytes()); err != nil {
			return files, err
		}
		files = append(files, p)
	}
	return files, nil
}
