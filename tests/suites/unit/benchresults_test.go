package unit

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"minimax-m3/benchmark"
	"minimax-m3/config"
	"minimax-m3/manifest"
	"minimax-m3/tests/framework/aiperfexport"
)

// summaryOf writes a played AIPerf run's summary (AIPerf's format, package aiperfexport) and
// reads it back as the sweep does.
func summaryOf(t *testing.T, p aiperfexport.Point, mode string) benchmark.Point {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, aiperfexport.Write(dir, p))
	got, err := benchmark.ReadSummary(filepath.Join(dir, benchmark.SummaryFile), p.Concurrency, mode)
	require.NoError(t, err)
	return got
}

func sweepPoints(t *testing.T) []benchmark.Point {
	t.Helper()
	var points []benchmark.Point
	for _, c := range []int{64, 16, 32} { // merged by concurrency, whatever the order they come in
		p := summaryOf(t, aiperfexport.Point{Concurrency: c, Requests: 15, Goodput: true}, "synthetic")
		p.Judge(0.01)
		points = append(points, p)
	}
	return points
}

var wantHeader = []string{"concurrency", "speculative_mode", "status", "requests", "errors", "error_pct",
	"request_throughput_rps", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "input_tokens_per_s", "total_tokens_per_s",
	"per_user_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_tpot_p50_ms", "itl_tpot_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
	"goodput_rps", "good_requests"}

// Every column from AIPerf's summary, in its real format: counts, throughputs (input tokens/s is
// total minus output), TTFT, ITL (AIPerf's TPOT), end-to-end latency and goodput.
func TestBenchmarkResultsMergeIntoOneTable(t *testing.T) {
	points := sweepPoints(t)
	assert.Equal(t, "0.12.0", points[0].AIPerfVersion)
	var b bytes.Buffer
	require.NoError(t, benchmark.WriteCSV(&b, benchmark.Series{GPUs: 24, Points: points}))
	rows, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 4)
	assert.Equal(t, wantHeader, rows[0])
	assert.Equal(t, []string{"16", "synthetic", "ok", "15", "0", "0.00", "1.60", "1600.00", "66.67", "16000.00", "17600.00",
		"125.00", "1440.00", "3200.00", "7.20", "16.00", "14400.00", "32000.00", "0.80", "7"}, rows[1])
	assert.Equal(t, "32", rows[2][0])
	assert.Equal(t, "64", rows[3][0])

	b.Reset()
	require.NoError(t, benchmark.WriteMarkdown(&b, benchmark.Series{GPUs: 24, Points: points}))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 5)
	assert.Equal(t, "| 16 | synthetic | ok | 15 | 0 | 0.00 | 1.60 | 1600.00 | 66.67 | 16000.00 | 17600.00 | 125.00 | 1440.00 | 3200.00 | 7.20 | 16.00 | 14400.00 | 32000.00 | 0.80 | 7 |", lines[2])

	// Without SLOs AIPerf writes no goodput: the columns stay empty, not 0.
	p := summaryOf(t, aiperfexport.Point{Concurrency: 8, Requests: 4}, "real")
	assert.False(t, p.HasGoodput)
	b.Reset()
	require.NoError(t, benchmark.WriteCSV(&b, benchmark.Series{GPUs: 12, Points: []benchmark.Point{p}}))
	rows, err = csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	assert.Equal(t, []string{"", ""}, rows[1][18:])
}

// A point where requests failed shows them, with AIPerf's error summary, and fails under the
// budget; a cancelled run fails whatever its errors; a run where every request failed has no
// throughput to read, and fails too.
func TestBenchmarkPointsWithFailedRequests(t *testing.T) {
	p := summaryOf(t, aiperfexport.Point{Concurrency: 8, Requests: 8, Errors: 2}, "real")
	assert.Equal(t, 8, p.Requests)
	assert.Equal(t, 2, p.Errors)
	assert.Equal(t, []benchmark.ErrorCount{{Code: 503, Type: "Service Unavailable", Message: "no worker available", Count: 2}}, p.ErrorSummary)
	p.Judge(0.25)
	assert.Empty(t, p.Failure, "20% failed, within a 25% budget")
	p.Judge(0.01)
	assert.Equal(t, "2 of 10 requests failed (20.0%), over the error budget of 1%; most often (2): 503 Service Unavailable no worker available", p.Failure)

	var b bytes.Buffer
	require.NoError(t, benchmark.WriteMarkdown(&b, benchmark.Series{GPUs: 12, Points: []benchmark.Point{p}}))
	assert.Contains(t, b.String(), "| 8 | real | FAILED: 2 of 10 requests failed (20.0%), over the error budget of 1%; most often (2): 503 Service Unavailable no worker available | 8 | 2 | 20.00 |")
	assert.Contains(t, b.String(), "Failed requests at c=8:\n- 2 × 503 Service Unavailable no worker available\n")

	cancelled := summaryOf(t, aiperfexport.Point{Concurrency: 8, Requests: 8, Cancelled: true}, "real")
	cancelled.Judge(1)
	assert.Equal(t, "AIPerf's run cancelled", cancelled.Failure)

	none := summaryOf(t, aiperfexport.Point{Concurrency: 8, Errors: 5}, "real")
	assert.Zero(t, none.OutputTokensPerSecond)
	none.Judge(0.5)
	assert.Equal(t, "5 of 5 requests failed (100.0%), over the error budget of 50%; most often (5): 503 Service Unavailable no worker available", none.Failure)
}

// A summary that is not AIPerf's, or misses what a point with successful requests must have, is
// an error naming what is missing.
func TestBenchmarkSummaryProblems(t *testing.T) {
	_, err := benchmark.ReadSummary(filepath.Join(t.TempDir(), "missing.json"), 8, "real")
	require.Error(t, err)
	dir := t.TempDir()
	broken := filepath.Join(dir, "summary.json")
	require.NoError(t, os.WriteFile(broken, []byte(`{"request_count": {"unit": "requests", "avg": 3}, "request_throughput": {"unit": "requests/sec", "avg": 1}}`), 0o644))
	_, err = benchmark.ReadSummary(broken, 8, "real")
	require.ErrorContains(t, err, "no output_token_throughput; no time_to_first_token; no inter_token_latency; no request_latency")

	// Latencies in another unit than AIPerf's display unit would be misread by a factor.
	doc, err := aiperfexport.Summary(aiperfexport.Point{Concurrency: 4, Requests: 3})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(doc, &m))
	m["time_to_first_token"].(map[string]any)["unit"] = "ns"
	doc, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(broken, doc, 0o644))
	_, err = benchmark.ReadSummary(broken, 4, "real")
	require.ErrorContains(t, err, `time_to_first_token is in "ns", not ms`)
}

type plotDoc struct {
	Title string `xml:"title"`
	Paths []struct {
		D      string `xml:"d,attr"`
		Series string `xml:"data-sweep,attr"`
	} `xml:"path"`
	Circles []struct {
		Cx          float64 `xml:"cx,attr"`
		Cy          float64 `xml:"cy,attr"`
		Series      string  `xml:"data-sweep,attr"`
		Concurrency int     `xml:"data-concurrency,attr"`
		PerUser     float64 `xml:"data-per-user,attr"`
		PerGPU      float64 `xml:"data-per-gpu,attr"`
		Mode        string  `xml:"data-speculative-mode,attr"`
		Failed      bool    `xml:"data-failed,attr"`
	} `xml:"circle"`
	Texts []struct {
		Class string `xml:"class,attr"`
		Text  string `xml:",chardata"`
	} `xml:"text"`
}

func TestBenchmarkPlotReadsBack(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, benchmark.WriteSVG(&b, "minimax-m3 disagg, synthetic acceptance", benchmark.Series{GPUs: 24, Points: sweepPoints(t)}))
	var doc plotDoc
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
	require.Len(t, doc.Paths, 1)
	assert.Equal(t, 3, strings.Count(doc.Paths[0].D, "M")+strings.Count(doc.Paths[0].D, "L"), "the points joined in order")
	var labels []string
	for _, tx := range doc.Texts {
		if tx.Class == "point-label" {
			labels = append(labels, tx.Text)
		}
	}
	assert.Equal(t, []string{"c16", "c32", "c64"}, labels)
}

// writeSweep leaves a finished sweep's output directory, as a sweep writes it.
func writeSweep(t *testing.T, meta benchmark.Metadata) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(meta)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, benchmark.MetadataFile), b, 0o644))
	return dir
}

// Two sweeps (agg on 12 GPUs, disagg on 24) side by side: one table with a row per sweep and
// point, throughput per GPU so the GPU counts compare, and one plot with a line per sweep.
func TestBenchmarkCompareSweeps(t *testing.T) {
	agg := writeSweep(t, benchmark.Metadata{Stack: "agg", RunID: "r1", SpeculativeMode: "real", GPUs: 12, Complete: true,
		Points: []benchmark.Point{summaryOf(t, aiperfexport.Point{Concurrency: 16, Requests: 10}, "real"), summaryOf(t, aiperfexport.Point{Concurrency: 8, Requests: 10}, "real")}})
	disagg := writeSweep(t, benchmark.Metadata{Stack: "disagg", RunID: "r2", SpeculativeMode: "real", GPUs: 24,
		Points: []benchmark.Point{summaryOf(t, aiperfexport.Point{Concurrency: 16, Requests: 10}, "real")}})
	out := filepath.Join(t.TempDir(), "cmp")
	files, err := benchmark.Compare([]string{agg, disagg}, out)
	require.NoError(t, err)
	assert.Len(t, files, 3)

	f, err := os.Open(filepath.Join(out, "compare.csv"))
	require.NoError(t, err)
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	_ = f.Close()
	assert.Equal(t, append([]string{"sweep", "gpus"}, wantHeader...), rows[0])
	require.Len(t, rows, 4)
	assert.Equal(t, []string{"agg r1 (real)", "12", "8"}, rows[1][:3])
	assert.Equal(t, []string{"agg r1 (real)", "12", "16"}, rows[2][:3])
	assert.Equal(t, []string{"disagg r2 (real) [incomplete]", "24", "16"}, rows[3][:3])
	assert.Equal(t, "133.33", rows[2][10], "agg: 1600 tokens/s over 12 GPUs")
	assert.Equal(t, "66.67", rows[3][10], "disagg: 1600 tokens/s over 24 GPUs")

	svg, err := os.ReadFile(filepath.Join(out, "compare.svg"))
	require.NoError(t, err)
	var doc plotDoc
	require.NoError(t, xml.Unmarshal(svg, &doc))
	require.Len(t, doc.Paths, 2)
	assert.Equal(t, "agg r1 (real)", doc.Paths[0].Series)
	assert.Equal(t, "disagg r2 (real) [incomplete]", doc.Paths[1].Series)
	require.Len(t, doc.Circles, 3)
	assert.InDelta(t, 1600.0/12, doc.Circles[1].PerGPU, 1e-9)
	assert.InDelta(t, 1600.0/24, doc.Circles[2].PerGPU, 1e-9)
	var legend []string
	for _, tx := range doc.Texts {
		if tx.Class == "legend" {
			legend = append(legend, tx.Text)
		}
	}
	assert.Equal(t, []string{"agg r1 (real) (12 GPUs)", "disagg r2 (real) [incomplete] (24 GPUs)"}, legend)

	_, err = benchmark.Compare([]string{agg}, out)
	require.ErrorContains(t, err, "at least two")
	_, err = benchmark.Compare([]string{agg, agg}, out)
	require.ErrorContains(t, err, "hold the same sweep (agg r1 (real))")
}

// benchmark.goodput's SLOs reach AIPerf as its `slos` (AIPerf's BenchmarkConfig.slos, metric tag
// to threshold in ms); unset, perf.yaml stays the recipe's; a negative SLO names its key.
func TestGoodputSLOsReachAIPerf(t *testing.T) {
	c := disaggConfig(t, map[string]string{"benchmark": `{"enabled": true, "goodput": {"timeToFirstTokenMs": 2000, "interTokenLatencyMs": 25}}`})
	perf, err := manifest.AIPerfConfig(&c)
	require.NoError(t, err)
	var doc struct {
		Benchmark struct {
			SLOs map[string]float64 `yaml:"slos"`
		} `yaml:"benchmark"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(perf), &doc))
	assert.Equal(t, map[string]float64{"time_to_first_token": 2000, "inter_token_latency": 25}, doc.Benchmark.SLOs)

	_, err = config.Parse(config.Raw{Values: map[string]string{"profile": "disagg", "namespace": `{"name":"inference"}`, "hfToken": testToken,
		"benchmark": `{"enabled": true, "goodput": {"requestLatencyMs": -1}}`}, Secrets: map[string]bool{"hfToken": true}})
	require.ErrorContains(t, err, "benchmark.goodput.requestLatencyMs")
}
