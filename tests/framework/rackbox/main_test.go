package rackbox_test

import (
	"fmt"
	"os"
	"testing"

	"minimax-m3/tests/framework/gogc"
)

// The box's servers collect garbage less often, as in the integration suite.
func TestMain(m *testing.M) {
	if err := gogc.Raise(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
