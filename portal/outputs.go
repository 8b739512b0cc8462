package portal

import "github.com/pulumi/pulumi/sdk/v3/go/auto"

// Outputs are a stack's outputs, typed.
type Outputs struct {
	Namespace       string `json:"namespace"`
	GraphName       string `json:"graphName"`
	FrontendService string `json:"frontendService"`
	FrontendPort    int    `json:"frontendPort"`
	FrontendURL     string `json:"frontendUrl"`
	GPUCount        int    `json:"gpuCount"`
	Model           string `json:"model"`
	ServedModelName string `json:"servedModelName"`
	ModelRevision   string `json:"modelRevision"`
	DraftModel      string `json:"draftModel"`
	DraftRevision   string `json:"draftRevision"`
	SpeculativeMode string `json:"speculativeMode"`
	CacheClaimName  string `json:"cacheClaimName"`
	ComputeDomain   string `json:"computeDomain"`
	// SmokeTest is the smoke test's result, when the stack ran one.
	SmokeTest map[string]any `json:"smokeTest,omitempty"`
}

func outputsOf(m auto.OutputMap) Outputs {
	plain := map[string]any{}
	for k, v := range m {
		if !v.Secret {
			plain[k] = v.Value
		}
	}
	return OutputsFromMap(plain)
}

// OutputsFromMap reads the outputs from their JSON form (the engine's, or a Stack's status).
func OutputsFromMap(m map[string]any) Outputs {
	str := func(k string) string { s, _ := m[k].(string); return s }
	num := func(k string) int {
		switch n := m[k].(type) {
		case float64:
			return int(n)
		case int64:
			return int(n)
		}
		return 0
	}
	o := Outputs{
		Namespace: str("namespace"), GraphName: str("graphName"), FrontendService: str("frontendService"),
		FrontendPort: num("frontendPort"), FrontendURL: str("frontendUrl"), GPUCount: num("gpuCount"),
		Model: str("model"), ServedModelName: str("servedModelName"), ModelRevision: str("modelRevision"),
		DraftModel: str("draftModel"), DraftRevision: str("draftRevision"), SpeculativeMode: str("speculativeMode"),
		CacheClaimName: str("cacheClaimName"), ComputeDomain: str("computeDomain"),
	}
	if st, ok := m["smokeTest"].(map[string]any); ok {
		o.SmokeTest = st
	}
	return o
}
