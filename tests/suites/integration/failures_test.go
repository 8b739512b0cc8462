package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBadConfigFailsPreviewBeforeAnyObjectExists(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	ns := "bad-config"
	s := newStack(t, "agg", ns, auto.ConfigMap{
		"minimax-m3:worker.tensorParallelSize": {Value: "3"},
		"minimax-m3:modelCache.storageClass":   {Value: "your-storage-class-name"},
	})
	_, err := s.preview(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error()+s.log.String(), "minimax-m3:worker.tensorParallelSize")
	assert.Contains(t, err.Error()+s.log.String(), "minimax-m3:modelCache.storageClass")
	// Shown once, as the program's error: not again as the engine's "an unhandled error occurred".
	assert.NotContains(t, err.Error()+s.log.String(), "an unhandled error occurred")
	assert.Equal(t, 1, strings.Count(s.log.String(), "minimax-m3:worker.tensorParallelSize: "), s.log.String())
	_, _, err = s.up(ctx)
	require.Error(t, err)
	_, exists := get(t, namespaceGVK, "", ns)
	assert.False(t, exists, "nothing reached the API server")
}
