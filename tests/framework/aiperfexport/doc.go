// Package aiperfexport plays AIPerf in the tests: it writes what AIPerf 0.12 leaves in a
// point's ARTIFACT_DIR, in AIPerf's own format, with values that follow the concurrency so a test
// can predict every cell of the merged table. AIPerf itself cannot run here (it needs a served
// model).
//
// The format is AIPerf's, from its source (github.com/ai-dynamo/aiperf):
//   - profile_export_aiperf.json: src/aiperf/exporters/metrics_json_exporter.py writes
//     JsonExportData (src/aiperf/common/models/export_models.py): schema_version, aiperf_version,
//     benchmark_id, one top-level object per metric tag (JsonMetricResult: "unit", then "avg",
//     "p1" … "p99", "min", "max", "std" for per-request metrics, only "unit" and "avg" for
//     throughputs and counts), input_config, was_cancelled, error_summary (a list of
//     {"error_details": {"code", "type", "message"}, "count"}), start_time and end_time; None
//     fields are left out (error_request_count when no request failed, goodput and
//     good_request_count without SLOs). Units are the display units: ms for latencies,
//     requests/sec, tokens/sec, tokens/sec/user. docs/reference/json-export-schema.md dates the
//     fields (schema 1.4 with AIPerf 0.12).
//   - profile_export.jsonl: one record per request, {"metadata": {…, "benchmark_phase": …},
//     "metrics": {tag: {"value", "unit"}}}, appended as requests complete
//     (post_processors/record_export_jsonl_writer.py).
//   - logs/aiperf.log: AIPerf's log file (common/logging.py: <artifact dir>/logs/aiperf.log).
package aiperfexport
