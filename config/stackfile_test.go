package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stack file's values as Pulumi hands them to a program; its secret's ciphertext is never one.
func TestStackFileValues(t *testing.T) {
	plain, secure, err := StackFileValues([]byte(`encryptionsalt: v1:abc
config:
  minimax-m3:profile: agg
  minimax-m3:namespace:
    name: inference
  minimax-m3:hfToken:
    secure: v1:AAAA
  minimax-m3:replicas: 3
`))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"minimax-m3:profile":   "agg",
		"minimax-m3:namespace": `{"name":"inference"}`,
		"minimax-m3:replicas":  "3",
	}, plain)
	assert.Equal(t, []string{"minimax-m3:hfToken"}, secure)

	_, _, err = StackFileValues([]byte("config: [\n"))
	require.Error(t, err)
}
