package config

// SmokeTestConfig is the recipe's smoke test, run by the stack itself: once the graph is Ready, a
// Job in the cluster asks the frontend for /v1/models and one chat completion, and `up` waits for
// it. It runs again for every new graph spec, and for nothing else.
type SmokeTestConfig struct {
	Enabled bool `json:"enabled"`
	// Image runs the test (it needs python3); empty uses `image`, which the frontend's nodes have.
	Image string `json:"image"`
	// Timeout bounds the test (Go duration); it becomes the Job's activeDeadlineSeconds.
	Timeout string `json:"timeout"`
	// Message and MaxTokens make the chat request.
	Message   string `json:"message"`
	MaxTokens int    `json:"maxTokens"`
}

// SmokeTestJobSuffixLength is what the smoke test Job's name adds to graphName: "-smoke-" and eight
// hex digits of the graph spec's hash.
const SmokeTestJobSuffixLength = len("-smoke-") + 8

// SmokeTestImage is the image the smoke test runs.
func (c *Config) SmokeTestImage() string {
	if c.SmokeTest.Image != "" {
		return c.SmokeTest.Image
	}
	return c.Image
}

func (s SmokeTestConfig) validate(v validator, key string, c *Config) {
	if !s.Enabled {
		return
	}
	if s.Image != "" {
		v.image(key+".image", s.Image)
	}
	v.duration(key+".timeout", s.Timeout)
	v.nonEmpty(key+".message", s.Message)
	v.atLeast(key+".maxTokens", s.MaxTokens, 1)
	// The Job's name becomes a label value of its pods: 63 characters at most.
	if n := len(c.GraphName) + SmokeTestJobSuffixLength; n > 63 {
		v.add(key+".enabled", "the smoke test Job's name (graphName + %d characters) would be %d characters, over Kubernetes' 63: shorten graphName or turn the smoke test off", SmokeTestJobSuffixLength, n)
	}
}
