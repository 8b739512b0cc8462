package integration

import (
	"context"
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
	_, _, err = s.up(ctx)
	require.Error(t, err)
	_, exists := get(t, namespaceGVK, "", ns)
	assert.False(t, exists, "nothing reached the API server")
}
