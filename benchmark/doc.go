// Package benchmark runs the recipe's benchmark sweep on a deployed stack and merges its results:
// one AIPerf summary (profile_export_aiperf.json) per concurrency point into one table (CSV and
// Markdown) and the plot recipes are compared by, output tokens/s per GPU against per-user
// tokens/s; several sweeps side by side (Compare).
package benchmark
