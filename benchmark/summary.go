package benchmark

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// SummaryFile is the name of AIPerf's JSON summary in a point's artifact directory.
const SummaryFile = "profile_export_aiperf.json"

// Point is one concurrency point's result, read from AIPerf's summary.
type Point struct {
	Concurrency int `json:"concurrency"`
	// SpeculativeMode is the graph's speculativeDecoding.mode during the point ("real" or
	// "synthetic"): the recipe's published figures use synthetic acceptance, so every result says.
	SpeculativeMode string `json:"speculativeMode"`
	// Requests is the number of requests that succeeded (AIPerf's request_count), Errors the number
	// that failed (error_request_count, absent when none did), and ErrorSummary the failures by
	// kind.
	Requests     int          `json:"requests"`
	Errors       int          `json:"errors"`
	ErrorSummary []ErrorCount `json:"errorSummary,omitempty"`
	// Cancelled: AIPerf's run was cancelled (was_cancelled), or said it is incomplete (is_complete
	// false, with its reason).
	Cancelled bool   `json:"cancelled,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Failure says why the sweep failed the point (cancelled, over the error budget); empty when it
	// passed.
	Failure string `json:"failure,omitempty"`
	// RequestThroughput is requests/s; OutputTokensPerSecond the aggregate output tokens/s,
	// TotalTokensPerSecond input and output tokens/s; PerUserTokensPerSecond the mean output
	// tokens/s one request sees.
	RequestThroughput      float64 `json:"requestThroughput"`
	OutputTokensPerSecond  float64 `json:"outputTokensPerSecond"`
	TotalTokensPerSecond   float64 `json:"totalTokensPerSecond"`
	PerUserTokensPerSecond float64 `json:"perUserTokensPerSecond"`
	// Time to first token, inter-token latency (AIPerf's per-request time per output token after
	// the first: it has no separate TPOT metric) and end-to-end request latency, in ms.
	TTFTp50 float64 `json:"ttftP50"`
	TTFTp99 float64 `json:"ttftP99"`
	ITLp50  float64 `json:"itlP50"`
	ITLp99  float64 `json:"itlP99"`
	E2Ep50  float64 `json:"e2eP50"`
	E2Ep99  float64 `json:"e2eP99"`
	// Goodput is requests/s that met every SLO of benchmark.goodput, GoodRequests their number;
	// both absent (HasGoodput false) when no SLO was set.
	HasGoodput   bool    `json:"hasGoodput,omitempty"`
	Goodput      float64 `json:"goodput,omitempty"`
	GoodRequests int     `json:"goodRequests,omitempty"`
	// AIPerfVersion is the version AIPerf wrote into its summary.
	AIPerfVersion string `json:"aiperfVersion,omitempty"`
}

// ErrorCount is one kind of failed request and how many failed so (AIPerf's error_summary).
type ErrorCount struct {
	Code    int    `json:"code,omitempty"`
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"`
	Count   int    `json:"count"`
}

// ErrorRate is the share of requests that failed.
func (p Point) ErrorRate() float64 {
	if p.Requests+p.Errors == 0 {
		return 0
	}
	return float64(p.Errors) / float64(p.Requests+p.Errors)
}

// aiperfSummary is what the sweep reads of profile_export_aiperf.json as AIPerf writes it
// (metrics_json_exporter.py, JsonExportData in common/models/export_models.py): one top-level
// object per metric tag, {"unit": …, "avg": …, "p50": …, "p99": …}, converted to the metric's
// display unit (ms for latencies), with only "unit" and "avg" for throughputs and counts; and
// beside them the run's own fields. Fields AIPerf left out (None or unset) are absent.
type aiperfSummary struct {
	AIPerfVersion string         `json:"aiperf_version"`
	WasCancelled  bool           `json:"was_cancelled"`
	IsComplete    *bool          `json:"is_complete"`
	Incomplete    string         `json:"incomplete_reason"`
	ErrorSummary  []aiperfErrors `json:"error_summary"`

	RequestThroughput      *aiperfMetric `json:"request_throughput"`
	OutputTokenThroughput  *aiperfMetric `json:"output_token_throughput"`
	TotalTokenThroughput   *aiperfMetric `json:"total_token_throughput"`
	PerUserTokenThroughput *aiperfMetric `json:"output_token_throughput_per_user"`
	TimeToFirstToken       *aiperfMetric `json:"time_to_first_token"`
	InterTokenLatency      *aiperfMetric `json:"inter_token_latency"`
	RequestLatency         *aiperfMetric `json:"request_latency"`
	RequestCount           *aiperfMetric `json:"request_count"`
	ErrorRequestCount      *aiperfMetric `json:"error_request_count"`
	Goodput                *aiperfMetric `json:"goodput"`
	GoodRequestCount       *aiperfMetric `json:"good_request_count"`
}

type aiperfMetric struct {
	Unit string   `json:"unit"`
	Avg  *float64 `json:"avg"`
	P50  *float64 `json:"p50"`
	P99  *float64 `json:"p99"`
}

type aiperfErrors struct {
	Details struct {
		Code    int    `json:"code"`
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error_details"`
	Count int `json:"count"`
}

// ReadSummary reads one point's AIPerf summary. A run that failed every request has no
// throughput or latency: those read as zero, and the point's counts say why.
func ReadSummary(path string, concurrency int, mode string) (Point, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Point{}, err
	}
	var s aiperfSummary
	if err := json.Unmarshal(b, &s); err != nil {
		return Point{}, fmt.Errorf("%s: %w", path, err)
	}
	p := Point{Concurrency: concurrency, SpeculativeMode: mode, AIPerfVersion: s.AIPerfVersion, Cancelled: s.WasCancelled}
	if s.WasCancelled {
		p.Reason = "cancelled"
	}
	if s.IsComplete != nil && !*s.IsComplete {
		p.Cancelled = true
		p.Reason = strings.TrimSpace("incomplete " + s.Incomplete)
	}
	var problems []string
	stat := func(name string, m *aiperfMetric, which string, into *float64) {
		if m == nil {
			return
		}
		v := map[string]*float64{"avg": m.Avg, "p50": m.P50, "p99": m.P99}[which]
		if v == nil {
			problems = append(problems, fmt.Sprintf("%s has no %s", name, which))
			return
		}
		*into = *v
	}
	count := func(m *aiperfMetric) int {
		if m == nil || m.Avg == nil {
			return 0
		}
		return int(*m.Avg + 0.5)
	}
	p.Requests, p.Errors = count(s.RequestCount), count(s.ErrorRequestCount)
	if s.RequestCount == nil && s.ErrorRequestCount == nil {
		problems = append(problems, "no request_count or error_request_count")
	}
	// Throughput and latency exist once any request succeeded.
	if p.Requests > 0 {
		for _, need := range []struct {
			name string
			m    *aiperfMetric
		}{{"request_throughput", s.RequestThroughput}, {"output_token_throughput", s.OutputTokenThroughput},
			{"time_to_first_token", s.TimeToFirstToken}, {"inter_token_latency", s.InterTokenLatency}, {"request_latency", s.RequestLatency}} {
			if need.m == nil {
				problems = append(problems, "no "+need.name)
			}
		}
	}
	stat("request_throughput", s.RequestThroughput, "avg", &p.RequestThroughput)
	stat("output_token_throughput", s.OutputTokenThroughput, "avg", &p.OutputTokensPerSecond)
	stat("total_token_throughput", s.TotalTokenThroughput, "avg", &p.TotalTokensPerSecond)
	stat("output_token_throughput_per_user", s.PerUserTokenThroughput, "avg", &p.PerUserTokensPerSecond)
	stat("time_to_first_token", s.TimeToFirstToken, "p50", &p.TTFTp50)
	stat("time_to_first_token", s.TimeToFirstToken, "p99", &p.TTFTp99)
	stat("inter_token_latency", s.InterTokenLatency, "p50", &p.ITLp50)
	stat("inter_token_latency", s.InterTokenLatency, "p99", &p.ITLp99)
	stat("request_latency", s.RequestLatency, "p50", &p.E2Ep50)
	stat("request_latency", s.RequestLatency, "p99", &p.E2Ep99)
	for name, m := range map[string]*aiperfMetric{"time_to_first_token": s.TimeToFirstToken, "inter_token_latency": s.InterTokenLatency, "request_latency": s.RequestLatency} {
		if m != nil && m.Unit != "" && m.Unit != "ms" {
			problems = append(problems, fmt.Sprintf("%s is in %q, not ms", name, m.Unit))
		}
	}
	if s.Goodput != nil {
		p.HasGoodput = true
		stat("goodput", s.Goodput, "avg", &p.Goodput)
		p.GoodRequests = count(s.GoodRequestCount)
	}
	for _, e := range s.ErrorSummary {
		p.ErrorSummary = append(p.ErrorSummary, ErrorCount{Code: e.Details.Code, Type: e.Details.Type, Message: e.Details.Message, Count: e.Count})
	}
	if len(problems) > 0 {
		return Point{}, fmt.Errorf("%s: %s", path, strings.Join(problems, "; "))
	}
	return p, nil
}

// Judge fails a point AIPerf cancelled, or whose share of failed requests exceeds budget (0 to 1).
func (p *Point) Judge(budget float64) {
	switch {
	case p.Cancelled:
		p.Failure = "AIPerf's run " + p.Reason
	case p.Requests+p.Errors == 0:
		p.Failure = "no request completed"
	case p.ErrorRate() > budget:
		p.Failure = fmt.Sprintf("%d of %d requests failed (%.1f%%), over the error budget of %g%%%s",
			p.Errors, p.Requests+p.Errors, 100*p.ErrorRate(), 100*budget, p.topError())
	default:
		p.Failure = ""
	}
}

// topError is the most frequent failure, for a message.
func (p Point) topError() string {
	var top *ErrorCount
	for i := range p.ErrorSummary {
		if top == nil || p.ErrorSummary[i].Count > top.Count {
			top = &p.ErrorSummary[i]
		}
	}
	if top == nil {
		return ""
	}
	return fmt.Sprintf("; most often (%d): %s", top.Count, top.String())
}

func (e ErrorCount) String() string {
	var parts []string
	if e.Code != 0 {
		parts = append(parts, fmt.Sprint(e.Code))
	}
	if e.Type != "" {
		parts = append(parts, e.Type)
	}
	if e.Message != "" {
		parts = append(parts, e.Message)
	}
	return strings.Join(parts, " ")
}
