package unit

import "testing"

// BenchmarkProgram measures one run of the whole program (config parsing, validation and every
// resource registration) against the mocked engine: the program's share of a preview or up.
//
//	cd tests && go test -run '^$' -bench Program ./suites/unit
func BenchmarkProgram(b *testing.B) {
	for _, stack := range []string{"agg", "disagg"} {
		b.Run(stack, func(b *testing.B) {
			for b.Loop() {
				if _, err := run(b, stack, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
