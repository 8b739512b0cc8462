package config

import (
	"encoding/json"
	"fmt"
	"slices"

	"gopkg.in/yaml.v3"
)

// StackFileValues reads the config of a stack settings file (Pulumi.<stack>.yaml) as Pulumi hands it
// to a program: plain values by their full key, strings as they are and everything else as JSON
// text. A secret (`secure:` ciphertext) is never a value: its key is listed in secure instead, for
// the caller to get the decrypted value from the engine, or to leave out.
func StackFileValues(b []byte) (plain map[string]string, secure []string, err error) {
	var file struct {
		Config map[string]any `yaml:"config"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		return nil, nil, err
	}
	plain = map[string]string{}
	for k, v := range file.Config {
		if m, ok := v.(map[string]any); ok && len(m) == 1 && m["secure"] != nil {
			secure = append(secure, k)
			continue
		}
		if s, ok := v.(string); ok {
			plain[k] = s
			continue
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", k, err)
		}
		plain[k] = string(j)
	}
	slices.Sort(secure)
	return plain, secure, nil
}
