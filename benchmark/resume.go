package benchmark

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// MetadataFile is sweep.json, in a sweep's output directory.
const MetadataFile = "sweep.json"

// LoadMetadata reads the sweep.json of a sweep's output directory.
func LoadMetadata(dir string) (Metadata, error) {
	var m Metadata
	b, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, MetadataFile), err)
	}
	return m, nil
}

// earlierRun is the sweep a resumed sweep continues, checked against this one's conditions; nil
// when not resuming. Without Resume, an output directory that holds a sweep is refused: its
// results are never overwritten by another run's.
func (s *Sweep) earlierRun(now Metadata) (*Metadata, error) {
	earlier, err := LoadMetadata(s.OutDir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && s.Resume:
		return nil, fmt.Errorf("resume: %s has no %s: there is no sweep to resume there", s.OutDir, MetadataFile)
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	case !s.Resume:
		return nil, fmt.Errorf("%s holds sweep %s already: resume it (-resume) or choose another output directory", s.OutDir, earlier.RunID)
	}
	var diffs []string
	differ := func(what string, was, is any) {
		if !reflect.DeepEqual(was, is) {
			diffs = append(diffs, fmt.Sprintf("%s was %v, is %v", what, was, is))
		}
	}
	differ("run ID", earlier.RunID, now.RunID)
	differ("stack", earlier.Stack, now.Stack)
	differ("graph", earlier.Graph, now.Graph)
	differ("namespace", earlier.Namespace, now.Namespace)
	differ("concurrency", earlier.Concurrency, now.Concurrency)
	differ("GPUs", earlier.GPUs, now.GPUs)
	differ("speculativeDecoding.mode", earlier.SpeculativeMode, now.SpeculativeMode)
	differ("syntheticAcceptanceLength", earlier.SyntheticAcceptanceLength, now.SyntheticAcceptanceLength)
	differ("numSpeculativeTokens", earlier.NumSpeculativeTokens, now.NumSpeculativeTokens)
	differ("benchmark.image", earlier.AIPerfImage, now.AIPerfImage)
	differ("benchmark.traceFile", earlier.TraceFile, now.TraceFile)
	differ("benchmark.traceSHA256", earlier.TraceSHA256, now.TraceSHA256)
	differ("benchmark.goodput", earlier.Goodput, now.Goodput)
	differ("error budget", earlier.ErrorBudget, now.ErrorBudget)
	differ("restart between points", earlier.RestartedBy, now.RestartedBy)
	if len(diffs) > 0 {
		return nil, fmt.Errorf("resume: the sweep in %s ran under other conditions, so its points and this run's would not compare: %s", s.OutDir, strings.Join(diffs, "; "))
	}
	return &earlier, nil
}

// fetched says whether a point's summary is in OutDir.
func (s *Sweep) fetched(concurrency int) bool {
	_, err := findFile(filepath.Join(s.OutDir, fmt.Sprintf("c%d", concurrency)), SummaryFile)
	return err == nil
}

// checkImages refuses to resume a sweep whose graph runs other images than when it started: the
// points would measure different programs.
func checkImages(earlier, now []ComponentImage) error {
	was := map[string]ComponentImage{}
	for _, c := range earlier {
		was[c.Component] = c
	}
	var diffs []string
	for _, c := range now {
		w, ok := was[c.Component]
		switch {
		case !ok:
			diffs = append(diffs, c.Component+" is new")
		case w.Image != c.Image:
			diffs = append(diffs, fmt.Sprintf("%s ran %s, runs %s", c.Component, w.Image, c.Image))
		case w.ImageID != "" && c.ImageID != "" && w.ImageID != c.ImageID:
			diffs = append(diffs, fmt.Sprintf("%s ran digest %s, runs %s", c.Component, w.ImageID, c.ImageID))
		}
		delete(was, c.Component)
	}
	for _, c := range slices.Sorted(maps.Keys(was)) {
		diffs = append(diffs, c+" is gone")
	}
	if len(diffs) > 0 {
		return fmt.Errorf("resume: the graph runs other images than when the sweep started: %s", strings.Join(diffs, "; "))
	}
	return nil
}
