package unit

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/benchmark"
)

// aiperfSummary writes an AIPerf-shaped profile_export_aiperf.json for one point.
func aiperfSummary(t *testing.T, dir string, c int) string {
	t.Helper()
	f := float64(c)
	body := fmt.Sprintf(`{
  "request_throughput": {"unit": "requests/sec", "avg": %g},
  "output_token_throughput": {"unit": "tokens/sec", "avg": %g},
  "output_token_throughput_per_user": {"unit": "tokens/sec/user", "avg": %g, "p50": 1},
  "time_to_first_token": {"unit": "ms", "avg": 1, "p50": %g, "p99": %g},
  "inter_token_latency": {"unit": "ms", "avg": 1, "p50": %g, "p99": %g},
  "input_config": {"benchmark": {"profiling": {"concurrency": %d}}}
}`, f/10, f*100, 2000/f, 100*f, 300*f, f/2, f, c)
	path := filepath.Join(dir, fmt.Sprintf("c%d", c), benchmark.SummaryFile)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	return path
}

func sweep(t *testing.T) []benchmark.Point {
	t.Helper()
	dir := t.TempDir()
	var points []benchmark.Point
	for _, c := range []int{64, 16, 32} { // merged by concurrency, whatever the order they come in
		p, err := benchmark.ReadSummary(aiperfSummary(t, dir, c), c, "synthetic")
		require.NoError(t, err)
		points = append(points, p)
	}
	return points
}

func TestBenchmarkResultsMergeIntoOneTable(t *testing.T) {
	points := sweep(t)
	var b bytes.Buffer
	require.NoError(t, benchmark.WriteCSV(&b, points, 24))
	rows, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 4)
	assert.Equal(t, []string{"concurrency", "speculative_mode", "request_throughput_rps", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
		"per_user_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"}, rows[0])
	assert.Equal(t, []string{"16", "synthetic", "1.60", "1600.00", "66.67", "125.00", "1600.00", "4800.00", "8.00", "16.00"}, rows[1])
	assert.Equal(t, "32", rows[2][0])
	assert.Equal(t, []string{"64", "synthetic", "6.40", "6400.00", "266.67", "31.25", "6400.00", "19200.00", "32.00", "64.00"}, rows[3])

	b.Reset()
	require.NoError(t, benchmark.WriteMarkdown(&b, points, 24))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 5)
	assert.Equal(t, "| 16 | synthetic | 1.60 | 1600.00 | 66.67 | 125.00 | 1600.00 | 4800.00 | 8.00 | 16.00 |", lines[2])

	_, err = benchmark.ReadSummary(filepath.Join(t.TempDir(), "missing.json"), 8, "real")
	require.Error(t, err)
	broken := filepath.Join(t.TempDir(), "summary.json")
	require.NoError(t, os.WriteFile(broken, []byte(`{"request_throughput": {"avg": 1}}`), 0o644))
	_, err = benchmark.ReadSummary(broken, 8, "real")
	require.ErrorContains(t, err, "no output_token_throughput")
}

func TestBenchmarkPlotReadsBack(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, benchmark.WriteSVG(&b, sweep(t), 24, "minimax-m3 disagg, synthetic acceptance"))
	var doc struct {
		XMLName xml.Name `xml:"svg"`
		Title   string   `xml:"title"`
		Path    struct {
			D string `xml:"d,attr"`
		} `xml:"path"`
		Circles []struct {
			Cx          float64 `xml:"cx,attr"`
			Cy          float64 `xml:"cy,attr"`
			Concurrency int     `xml:"data-concurrency,attr"`
			PerUser     float64 `xml:"data-per-user,attr"`
			PerGPU      float64 `xml:"data-per-gpu,attr"`
			Mode        string  `xml:"data-speculative-mode,attr"`
		} `xml:"circle"`
		Texts []struct {
			Class string `xml:"class,attr"`
			Text  string `xml:",chardata"`
		} `xml:"text"`
	}
	require.NoError(t, xml.Unmarshal(b.Bytes(), &doc))
	assert.Equal(t, "minimax-m3 disagg, synthetic acceptance", doc.Title)
	require.Len(t, doc.Circles, 3)
	for i, want := range []struct {
		c               int
		perUser, perGPU float64
	}{{16, 125, 1600.0 / 24}, {32, 62.5, 3200.0 / 24}, {64, 31.25, 6400.0 / 24}} {
		got := doc.Circles[i]
		assert.Equal(t, want.c, got.Concurrency)
		assert.InDelta(t, want.perUser, got.PerUser, 1e-9)
		assert.InDelta(t, want.perGPU, got.PerGPU, 1e-9)
		assert.Equal(t, "synthetic", got.Mode)
	}
	// Higher concurrency: more throughput per GPU (higher on the plot, smaller y), less per user
	// (further left).
	assert.Less(t, doc.Circles[2].Cy, doc.Circles[0].Cy)
	assert.Less(t, doc.Circles[2].Cx, doc.Circles[0].Cx)
	assert.Equal(t, 3, strings.Count(doc.Path.D, "M")+strings.Count(doc.Path.D, "L"), "the points joined in order")
	var labels []string
	for _, tx := range doc.Texts {
		if tx.Class == "point-label" {
			labels = append(labels, tx.Text)
		}
	}
	assert.Equal(t, []string{"c16", "c32", "c64"}, labels)
}
