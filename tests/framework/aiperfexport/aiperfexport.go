package aiperfexport

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Point is what a played AIPerf run produces at one concurrency.
type Point struct {
	Concurrency int
	// Requests succeeded, Errors failed (with HTTP 503 from the frontend, as AIPerf records an
	// error response).
	Requests, Errors int
	// Cancelled marks the run as AIPerf marks an interrupted one.
	Cancelled bool
	// Goodput adds AIPerf's goodput metrics (it computes them only with SLOs set): half the
	// requests good.
	Goodput bool
}

func stat(unit string, base float64) map[string]any {
	return map[string]any{"unit": unit, "avg": base, "p1": base * 0.5, "p5": base * 0.6, "p10": base * 0.7, "p25": base * 0.8,
		"p50": base * 0.9, "p75": base * 1.1, "p90": base * 1.5, "p95": base * 1.8, "p99": base * 2, "min": base * 0.4, "max": base * 2.5,
		"std": base * 0.3, "count": 1, "sum": base}
}

func avg(unit string, v float64) map[string]any { return map[string]any{"unit": unit, "avg": v} }

// Summary is profile_export_aiperf.json for p. With c its concurrency: request throughput c/10
// req/s, output c×100 tok/s, total c×1100 tok/s, c×20 ms … per-user 2000/c tok/s, TTFT p50 90c
// and p99 200c ms, ITL p50 0.45c and p99 c ms, end-to-end p50 900c and p99 2000c ms.
func Summary(p Point) ([]byte, error) {
	c := float64(p.Concurrency)
	doc := map[string]any{
		"schema_version": "1.4",
		"aiperf_version": "0.12.0",
		"benchmark_id":   fmt.Sprintf("played-c%d", p.Concurrency),
		"request_count":  avg("requests", float64(p.Requests)),
		"input_config": map[string]any{"benchmark": map[string]any{"profiling": map[string]any{
			"type": "concurrency", "concurrency": p.Concurrency, "requests": p.Requests + p.Errors}}},
		"was_cancelled": p.Cancelled,
		"error_summary": []any{},
		"start_time":    "2026-12-03T10:00:00.000000",
		"end_time":      "2026-12-03T10:10:00.000000",
	}
	if p.Requests > 0 {
		for tag, m := range map[string]map[string]any{
			"request_throughput":               avg("requests/sec", c/10),
			"output_token_throughput":          avg("tokens/sec", 100*c),
			"total_token_throughput":           avg("tokens/sec", 1100*c),
			"output_token_throughput_per_user": stat("tokens/sec/user", 2000/c),
			"time_to_first_token":              stat("ms", 100*c),
			"inter_token_latency":              stat("ms", c/2),
			"request_latency":                  stat("ms", 1000*c),
			"output_sequence_length":           stat("tokens", 400),
			"input_sequence_length":            stat("tokens", 65536),
			"benchmark_duration":               avg("sec", 600),
		} {
			doc[tag] = m
		}
	}
	if p.Errors > 0 {
		doc["error_request_count"] = avg("requests", float64(p.Errors))
		doc["error_summary"] = []any{map[string]any{
			"error_details": map[string]any{"code": 503, "type": "Service Unavailable", "message": "no worker available"},
			"count":         p.Errors,
		}}
	}
	if p.Goodput {
		doc["good_request_count"] = avg("requests", float64(p.Requests/2))
		doc["goodput"] = avg("requests/sec", c/20)
	}
	return json.MarshalIndent(doc, "", "  ")
}

// Records is profile_export.jsonl: one warmup record per concurrency slot (recent AIPerf versions
// write them, marked), then one record per profiled request.
func Records(p Point) []byte {
	var b strings.Builder
	line := func(i int, phase string, failed bool) {
		rec := map[string]any{
			"metadata": map[string]any{"session_num": i, "x_request_id": fmt.Sprintf("req-%s-%d", phase, i), "benchmark_phase": phase,
				"request_start_ns": 1_000_000 * i, "request_end_ns": 1_000_000*i + 500},
			"metrics": map[string]any{"request_latency": map[string]any{"value": 1000 * float64(p.Concurrency), "unit": "ms"}},
		}
		if failed {
			rec["error"] = map[string]any{"code": 503, "type": "Service Unavailable", "message": "no worker available"}
		}
		j, _ := json.Marshal(rec)
		b.Write(j)
		b.WriteByte('\n')
	}
	for i := range p.Concurrency {
		line(i, "warmup", false)
	}
	for i := range p.Requests + p.Errors {
		line(i, "profiling", i >= p.Requests)
	}
	return []byte(b.String())
}

// Write writes the summary, the records and the log into dir, as AIPerf leaves them.
func Write(dir string, p Point) error {
	summary, err := Summary(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	for name, content := range map[string][]byte{
		"profile_export_aiperf.json": summary,
		"profile_export.jsonl":       Records(p),
		"logs/aiperf.log":            fmt.Appendf(nil, "INFO (played AIPerf) profiling at concurrency %d: %d requests, %d failed\n", p.Concurrency, p.Requests, p.Errors),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return err
		}
	}
	return nil
}
