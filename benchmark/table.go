package benchmark

import (
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Series is one sweep's points as a table or plot shows them: Label names the sweep (stack, run,
// speculative mode) when several are compared, GPUs divides its throughput per GPU.
type Series struct {
	Label  string
	GPUs   int
	Points []Point
}

// Sorted orders points by concurrency.
func Sorted(points []Point) []Point {
	out := append([]Point(nil), points...)
	sort.Slice(out, func(i, j int) bool { return out[i].Concurrency < out[j].Concurrency })
	return out
}

// columns are the table's, after the sweep and GPU columns a comparison adds.
var columns = []string{"concurrency", "speculative_mode", "status", "requests", "errors", "error_pct",
	"request_throughput_rps", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "input_tokens_per_s", "total_tokens_per_s",
	"per_user_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_tpot_p50_ms", "itl_tpot_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
	"goodput_rps", "good_requests"}

// Header is the table's header: columns, after sweep and gpus when several series are compared.
func Header(compare bool) []string {
	if compare {
		return append([]string{"sweep", "gpus"}, columns...)
	}
	return columns
}

func row(p Point, gpus int) []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	status := "ok"
	if p.Failure != "" {
		status = "FAILED: " + p.Failure
	}
	input := ""
	if p.TotalTokensPerSecond > 0 {
		input = f(p.TotalTokensPerSecond - p.OutputTokensPerSecond)
	}
	goodput, good := "", ""
	if p.HasGoodput {
		goodput, good = f(p.Goodput), strconv.Itoa(p.GoodRequests)
	}
	return []string{strconv.Itoa(p.Concurrency), p.SpeculativeMode, status, strconv.Itoa(p.Requests), strconv.Itoa(p.Errors), f(100 * p.ErrorRate()),
		f(p.RequestThroughput), f(p.OutputTokensPerSecond), f(p.OutputTokensPerSecond / float64(gpus)), input, f(p.TotalTokensPerSecond),
		f(p.PerUserTokensPerSecond), f(p.TTFTp50), f(p.TTFTp99), f(p.ITLp50), f(p.ITLp99), f(p.E2Ep50), f(p.E2Ep99),
		goodput, good}
}

// rows are the table's rows: each series' points by concurrency, series in order.
func rows(series []Series) [][]string {
	compare := len(series) > 1
	var out [][]string
	for _, s := range series {
		for _, p := range Sorted(s.Points) {
			r := row(p, s.GPUs)
			if compare {
				r = append([]string{s.Label, strconv.Itoa(s.GPUs)}, r...)
			}
			out = append(out, r)
		}
	}
	return out
}

// WriteCSV writes the merged table, one row per point by concurrency (per series, when compared).
func WriteCSV(w io.Writer, series ...Series) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(Header(len(series) > 1)); err != nil {
		return err
	}
	if err := cw.WriteAll(rows(series)); err != nil {
		return err
	}
	return cw.Error()
}

// WriteMarkdown writes the merged table as Markdown, and under it each failed point's errors.
func WriteMarkdown(w io.Writer, series ...Series) error {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	header := Header(len(series) > 1)
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range rows(series) {
		line(r)
	}
	for _, s := range series {
		for _, p := range Sorted(s.Points) {
			if len(p.ErrorSummary) == 0 {
				continue
			}
			where := fmt.Sprintf("c=%d", p.Concurrency)
			if s.Label != "" {
				where = s.Label + " " + where
			}
			fmt.Fprintf(&b, "\nFailed requests at %s:\n", where)
			for _, e := range p.ErrorSummary {
				fmt.Fprintf(&b, "- %d × %s\n", e.Count, e)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
