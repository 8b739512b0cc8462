package benchmark

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
)

// svg is the plot's document, written through encoding/xml.
type svg struct {
	XMLName xml.Name   `xml:"svg"`
	NS      string     `xml:"xmlns,attr"`
	Width   int        `xml:"width,attr"`
	Height  int        `xml:"height,attr"`
	Title   string     `xml:"title"`
	Lines   []svgLine  `xml:"line"`
	Paths   []svgPath  `xml:"path"`
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
	Series string `xml:"data-sweep,attr,omitempty"`
}

type svgPoint struct {
	Cx          float64 `xml:"cx,attr"`
	Cy          float64 `xml:"cy,attr"`
	R           float64 `xml:"r,attr"`
	Fill        string  `xml:"fill,attr"`
	Series      string  `xml:"data-sweep,attr,omitempty"`
	Concurrency int     `xml:"data-concurrency,attr"`
	PerUser     float64 `xml:"data-per-user,attr"`
	PerGPU      float64 `xml:"data-per-gpu,attr"`
	Mode        string  `xml:"data-speculative-mode,attr"`
	Failed      bool    `xml:"data-failed,attr,omitempty"`
}

type svgText struct {
	X     float64 `xml:"x,attr"`
	Y     float64 `xml:"y,attr"`
	Class string  `xml:"class,attr"`
	Fill  string  `xml:"fill,attr,omitempty"`
	Text  string  `xml:",chardata"`
}

// seriesColors tell compared sweeps apart.
var seriesColors = []string{"steelblue", "darkorange", "seagreen", "crimson", "purple", "saddlebrown"}

// WriteSVG plots output tokens/s per GPU (y) against per-user tokens/s (x), one labelled point
// per concurrency joined in order, one line per series with a legend when several are compared:
// the throughput/interactivity trade-off. A failed point is drawn hollow. Each point carries its
// values as data- attributes, so the plot can be read back.
func WriteSVG(w io.Writer, title string, series ...Series) error {
	const width, height, margin = 720, 480, 60
	maxX, maxY := 1.0, 1.0
	for _, s := range series {
		for _, p := range s.Points {
			maxX = math.Max(maxX, p.PerUserTokensPerSecond)
			maxY = math.Max(maxY, p.OutputTokensPerSecond/float64(s.GPUs))
		}
	}
	maxX, maxY = maxX*1.1, maxY*1.1
	x := func(v float64) float64 { return margin + v/maxX*(width-2*margin) }
	y := func(v float64) float64 { return height - margin - v/maxY*(height-2*margin) }
	doc := svg{NS: "http://www.w3.org/2000/svg", Width: width, Height: height, Title: title,
		Lines: []svgLine{
			{margin, height - margin, width - margin, height - margin, "black"},
			{margin, height - margin, margin, margin, "black"},
		},
		Texts: []svgText{
			{X: width / 2, Y: height - 15, Class: "x-label", Text: "per-user output tokens/s"},
			{X: 15, Y: height / 2, Class: "y-label", Text: "output tokens/s per GPU"},
			{X: width / 2, Y: 25, Class: "title", Text: title},
			{X: margin, Y: height - margin + 18, Class: "x-tick", Text: "0"},
			{X: width - margin, Y: height - margin + 18, Class: "x-tick", Text: strconv.FormatFloat(maxX, 'f', 0, 64)},
			{X: margin - 40, Y: margin, Class: "y-tick", Text: strconv.FormatFloat(maxY, 'f', 0, 64)},
		},
	}
	for si, s := range series {
		color := seriesColors[si%len(seriesColors)]
		path := svgPath{Fill: "none", Stroke: color, Series: s.Label}
		for i, p := range Sorted(s.Points) {
			perGPU := p.OutputTokensPerSecond / float64(s.GPUs)
			cx, cy := x(p.PerUserTokensPerSecond), y(perGPU)
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			path.D += fmt.Sprintf("%s%.1f %.1f ", cmd, cx, cy)
			fill := color
			if p.Failure != "" {
				fill = "white"
			}
			doc.Circles = append(doc.Circles, svgPoint{Cx: cx, Cy: cy, R: 4, Fill: fill, Series: s.Label, Concurrency: p.Concurrency,
				PerUser: p.PerUserTokensPerSecond, PerGPU: perGPU, Mode: p.SpeculativeMode, Failed: p.Failure != ""})
			doc.Texts = append(doc.Texts, svgText{X: cx + 6, Y: cy - 6, Class: "point-label", Text: "c" + strconv.Itoa(p.Concurrency)})
		}
		doc.Paths = append(doc.Paths, path)
		if len(series) > 1 {
			doc.Texts = append(doc.Texts, svgText{X: width - margin - 200, Y: float64(margin + 16*si), Class: "legend", Fill: color,
				Text: fmt.Sprintf("%s (%d GPUs)", s.Label, s.GPUs)})
		}
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(doc)
}
