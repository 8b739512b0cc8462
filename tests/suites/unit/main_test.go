package unit

import (
	"os"
	"testing"
)

// TestMain turns off client-go's streaming list (the WatchListClient feature, read from the
// environment once per process): the fake clientsets these tests use for the API server do not
// send the bookmark that ends a streamed list, so a watch on them would wait forever for its
// first events. Informers then list and watch, as with an API server without the feature.
func TestMain(m *testing.M) {
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
