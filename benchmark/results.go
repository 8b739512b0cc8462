// Package benchmark merges the results of a benchmark sweep: one AIPerf summary
// (profile_export_aiperf.json) per concurrency point into one table (CSV and Markdown) and the plot
// recipes are compared by, output tokens/s per GPU against per-user tokens/s.
package benchmark

import (
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
)

// SummaryFile is the name of AIPerf's JSON summary in a point's artifact directory.
const SummaryFile = "profile_export_aiperf.json"

// Point is one concurrency point's result.
type Point struct {
	Concurrency int
	// SpeculativeMode is the graph's speculativeDecoding.mode during the point ("real" or
	// "synthetic"): the recipe's published figures use synthetic acceptance, so every result says.
	SpeculativeMode string
	// RequestThroughput is requests/s; OutputTokensPerSecond the aggregate output tokens/s;
	// PerUserTokensPerSecond the mean output tokens/s one request sees.
	RequestThroughput, OutputTokensPerSecond, PerUserTokensPerSecond float64
	// Time to first token and inter-token latency, in ms.
	TTFTp50, TTFTp99, ITLp50, ITLp99 float64
}

// metric is one AIPerf statistic block ({"avg": …, "p50": …, "p99": …, "unit": …}).
type metric map[string]any

func (m metric) get(stat string) (float64, error) {
	v, ok := m[stat].(float64)
	if !ok {
		return 0, fmt.Errorf("no %s", stat)
	}
	return v, nil
}

// ReadSummary reads one point's AIPerf summary.
func ReadSummary(path string, concurrency int, mode string) (Point, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Point{}, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Point{}, fmt.Errorf("%s: %w", path, err)
	}
	p := Point{Concurrency: concurrency, SpeculativeMode: mode}
	for _, f := range []struct {
		name, stat string
		into       *float64
	}{
		{"request_throughput", "avg", &p.RequestThroughput},
		{"output_token_throughput", "avg", &p.OutputTokensPerSecond},
		{"output_token_throughput_per_user", "avg", &p.PerUserTokensPerSecond},
		{"time_to_first_token", "p50", &p.TTFTp50},
		{"time_to_first_token", "p99", &p.TTFTp99},
		{"inter_token_latency", "p50", &p.ITLp50},
		{"inter_token_latency", "p99", &p.ITLp99},
	} {
		var m metric
		if err := json.Unmarshal(raw[f.name], &m); err != nil || m == nil {
			return Point{}, fmt.Errorf("%s: no %s", path, f.name)
		}
		v, err := m.get(f.stat)
		if err != nil {
			return Point{}, fmt.Errorf("%s: %s: %w", path, f.name, err)
		}
		*f.into = v
	}
	return p, nil
}

// Sorted orders points by concurrency.
func Sorted(points []Point) []Point {
	out := append([]Point(nil), points...)
	sort.Slice(out, func(i, j int) bool { return out[i].Concurrency < out[j].Concurrency })
	return out
}

var header = []string{"concurrency", "speculative_mode", "request_throughput_rps", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
	"per_user_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"}

func row(p Point, gpus int) []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	return []string{strconv.Itoa(p.Concurrency), p.SpeculativeMode, f(p.RequestThroughput), f(p.OutputTokensPerSecond),
		f(p.OutputTokensPerSecond / float64(gpus)), f(p.PerUserTokensPerSecond), f(p.TTFTp50), f(p.TTFTp99), f(p.ITLp50), f(p.ITLp99)}
}

// WriteCSV writes the merged table, one row per point by concurrency.
func WriteCSV(w io.Writer, points []Point, gpus int) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, p := range Sorted(points) {
		if err := cw.Write(row(p, gpus)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteMarkdown writes the merged table as Markdown.
func WriteMarkdown(w io.Writer, points []Point, gpus int) error {
	line := func(cells []string) error {
		s := "|"
		for _, c := range cells {
			s += " " + c + " |"
		}
		_, err := fmt.Fprintln(w, s)
		return err
	}
	if err := line(header); err != nil {
		return err
	}
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	if err := line(sep); err != nil {
		return err
	}
	for _, p := range Sorted(points) {
		if err := line(row(p, gpus)); err != nil {
			return err
		}
	}
	return nil
}

// svg is the plot's document, written through encoding/xml.
type svg struct {
	XMLName xml.Name   `xml:"svg"`
	NS      string     `xml:"xmlns,attr"`
	Width   int        `xml:"width,attr"`
	Height  int        `xml:"height,attr"`
	Title   string     `xml:"title"`
	Lines   []svgLine  `xml:"line"`
	Path    svgPath    `xml:"path"`
	Circles []svgPoint `xml:"circle"`
	Texts   []svgText  `xml:"text"`
}

type svgLine struct {
	X1, Y1, X2, Y2 float64 `xml:",attr"`
	Stroke         string  `xml:"stroke,attr"`
}

type svgPath struct {
	D      string `xml:"d,attr"`
	Fill   string `xml:"fill,attr"`
	Stroke string `xml:"stroke,attr"`
}

type svgPoint struct {
	Cx          float64 `xml:"cx,attr"`
	Cy          float64 `xml:"cy,attr"`
	R           float64 `xml:"r,attr"`
	Concurrency int     `xml:"data-concurrency,attr"`
	PerUser     float64 `xml:"data-per-user,attr"`
	PerGPU      float64 `xml:"data-per-gpu,attr"`
	Mode        string  `xml:"data-speculative-mode,attr"`
}

type svgText struct {
	X     float64 `xml:"x,attr"`
	Y     float64 `xml:"y,attr"`
	Class string  `xml:"class,attr"`
	Text  string  `xml:",chardata"`
}

// WriteSVG plots output tokens/s per GPU (y) against per-user tokens/s (x), one labelled point
// per concurrency joined in order: the throughput/interactivity trade-off of the sweep. Each
// point carries its values as data- attributes, so the plot can be read back.
func WriteSVG(w io.Writer, points []Point, gpus int, title string) error {
	const width, height, margin = 720, 480, 60
	ps := Sorted(points)
	maxX, maxY := 1.0, 1.0
	for _, p := range ps {
		maxX = math.Max(maxX, p.PerUserTokensPerSecond)
		maxY = math.Max(maxY, p.OutputTokensPerSecond/float64(gpus))
	}
	maxX, maxY = maxX*1.1, maxY*1.1
	x := func(v float64) float64 { return margin + v/maxX*(width-2*margin) }
	y := func(v float64) float64 { return height - margin - v/maxY*(height-2*margin) }
	doc := svg{NS: "http://www.w3.org/2000/svg", Width: width, Height: height, Title: title,
		Lines: []svgLine{
			{margin, height - margin, width - margin, height - margin, "black"},
			{margin, height - margin, margin, margin, "black"},
		},
		Path: svgPath{Fill: "none", Stroke: "steelblue"},
		Texts: []svgText{
			{width / 2, height - 15, "x-label", "per-user output tokens/s"},
			{15, height / 2, "y-label", "output tokens/s per GPU"},
			{width / 2, 25, "title", title},
			{margin, height - margin + 18, "x-tick", "0"},
			{width - margin, height - margin + 18, "x-tick", strconv.FormatFloat(maxX, 'f', 0, 64)},
			{margin - 40, margin, "y-tick", strconv.FormatFloat(maxY, 'f', 0, 64)},
		},
	}
	for i, p := range ps {
		perGPU := p.OutputTokensPerSecond / float64(gpus)
		cx, cy := x(p.PerUserTokensPerSecond), y(perGPU)
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		doc.Path.D += fmt.Sprintf("%s%.1f %.1f ", cmd, cx, cy)
		doc.Circles = append(doc.Circles, svgPoint{cx, cy, 4, p.Concurrency, p.PerUserTokensPerSecond, perGPU, p.SpeculativeMode})
		doc.Texts = append(doc.Texts, svgText{cx + 6, cy - 6, "point-label", "c" + strconv.Itoa(p.Concurrency)})
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(doc)
}
