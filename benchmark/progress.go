package benchmark

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// RecordsFile is AIPerf's per-request records in a point's artifact directory. AIPerf appends each
// record as it completes (its buffered JSONL writer flushes every 100 records or 2 seconds), so
// its lines count the requests done so far.
const RecordsFile = "profile_export.jsonl"

// countScript counts a records file's requests, leaving out warmup requests (recent AIPerf versions
// write them too, with benchmark_phase "warmup"); nothing when AIPerf has written none yet.
const countScript = `test -f "$1" || exit 0; grep -vc '"benchmark_phase": *"warmup"' "$1" || true`

// describeBenchmark is a point's progress at each heartbeat: the Job's pods, the requests AIPerf
// has completed out of the trace's, the time since the Job started, and an estimate of the rest at
// the rate measured since the first request completed.
func (s *Sweep) describeBenchmark(helper, job, dir string, total int, started time.Time) func(context.Context) string {
	describeJob := s.describeJob(job)
	var (
		firstAt   time.Time
		firstDone int
	)
	return func(ctx context.Context) string {
		d := describeJob(ctx)
		var out bytes.Buffer
		err := s.exec(ctx, helper, []string{"sh", "-c", countScript, "sh", path.Join(dir, RecordsFile)}, nil, &out)
		text := strings.TrimSpace(out.String())
		if err != nil {
			return d
		}
		elapsed := time.Since(started).Round(time.Second)
		if text == "" {
			return d + fmt.Sprintf("; AIPerf: no request completed yet, %s since the Job started", elapsed)
		}
		done, err := strconv.Atoi(text)
		if err != nil {
			return d
		}
		msg := fmt.Sprintf("; AIPerf: %d of %d requests done, %s since the Job started", done, total, elapsed)
		now := time.Now()
		switch {
		case firstAt.IsZero() && done > 0:
			firstAt, firstDone = now, done
		case done > firstDone && done < total:
			rate := float64(done-firstDone) / now.Sub(firstAt).Seconds()
			left := time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second)
			msg += fmt.Sprintf(", about %s left", left)
		}
		return d + msg
	}
}
