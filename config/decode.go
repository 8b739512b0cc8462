package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// decodeValue sets a typed config field from a stack value, the way a user can write it:
//   - `pulumi config set --path` stores a digit-only value as a number, true/false as a boolean and
//     everything else (a decimal such as 0.85 included) as a string;
//   - `pulumi config set --type` and a hand-edited stack file can give any JSON type.
//
// So a number field accepts a number or a string holding one, a boolean field true/false in
// either form, and a string field a string, a number or a boolean (as written). Objects merge into
// the defaults field by field (a null map entry removes a default entry); lists replace the
// default list. Every problem is reported at its own key, unknown fields included.
func decodeValue(ps *Problems, key string, raw any, dst reflect.Value) {
	t := dst.Type()
	switch t.Kind() {
	case reflect.String:
		switch v := raw.(type) {
		case string:
			dst.SetString(v)
		case json.Number:
			dst.SetString(v.String())
		case bool:
			dst.SetString(strconv.FormatBool(v))
		default:
			ps.Add(key, "must be a string, got %s", describeJSON(raw))
		}
	case reflect.Int, reflect.Int64:
		text, ok := scalarText(raw)
		n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		if !ok || err != nil {
			ps.Add(key, "must be a whole number, got %s", describeJSON(raw))
			return
		}
		dst.SetInt(n)
	case reflect.Float64:
		text, ok := scalarText(raw)
		f, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
		if !ok || err != nil {
			ps.Add(key, "must be a number, got %s", describeJSON(raw))
			return
		}
		dst.SetFloat(f)
	case reflect.Bool:
		switch v := raw.(type) {
		case bool:
			dst.SetBool(v)
		case string:
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "true":
				dst.SetBool(true)
			case "false":
				dst.SetBool(false)
			default:
				ps.Add(key, "must be true or false, got %s", describeJSON(raw))
			}
		default:
			ps.Add(key, "must be true or false, got %s", describeJSON(raw))
		}
	case reflect.Pointer:
		if text, isText := raw.(string); raw == nil || isText && strings.TrimSpace(text) == "null" {
			// null, or its text: what `pulumi config set --path key null` stores.
			dst.SetZero()
			return
		}
		if dst.IsNil() {
			dst.Set(reflect.New(t.Elem()))
		}
		decodeValue(ps, key, raw, dst.Elem())
	case reflect.Struct:
		obj, ok := raw.(map[string]any)
		if !ok {
			ps.Add(key, "must be an object, got %s", describeJSON(raw))
			return
		}
		fields := structFields(t)
		for _, name := range slices.Sorted(maps.Keys(obj)) {
			i, known := fields[name]
			if !known {
				ps.Add(join(key, name), "unknown field (known fields of %s: %s)", Key(key), strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
				continue
			}
			decodeValue(ps, join(key, name), obj[name], dst.Field(i))
		}
	case reflect.Map:
		obj, ok := raw.(map[string]any)
		if !ok {
			ps.Add(key, "must be an object, got %s", describeJSON(raw))
			return
		}
		merged := reflect.MakeMap(t)
		if !dst.IsNil() {
			for _, k := range dst.MapKeys() {
				merged.SetMapIndex(k, dst.MapIndex(k))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(obj)) {
			k := reflect.ValueOf(name)
			if obj[name] == nil {
				merged.SetMapIndex(k, reflect.Value{}) // null removes a default entry
				continue
			}
			elem := reflect.New(t.Elem()).Elem()
			decodeValue(ps, join(key, name), obj[name], elem)
			merged.SetMapIndex(k, elem)
		}
		dst.Set(merged)
	case reflect.Slice:
		if text, isText := raw.(string); isText && strings.HasPrefix(strings.TrimSpace(text), "[") {
			// A list written as JSON text: what `pulumi config set --path key '[]'` stores.
			dec := json.NewDecoder(strings.NewReader(text))
			dec.UseNumber()
			var parsed any
			if dec.Decode(&parsed) == nil && !dec.More() {
				raw = parsed
			}
		}
		list, ok := raw.([]any)
		if !ok {
			ps.Add(key, "must be a list, got %s", describeJSON(raw))
			return
		}
		out := reflect.MakeSlice(t, len(list), len(list))
		for i, item := range list {
			decodeValue(ps, fmt.Sprintf("%s[%d]", key, i), item, out.Index(i))
		}
		dst.Set(out)
	case reflect.Interface:
		if raw == nil {
			dst.SetZero()
			return
		}
		dst.Set(reflect.ValueOf(raw))
	default:
		ps.Add(key, "cannot be set (unsupported type %s)", t)
	}
}

// decodeTopLevel sets a top-level field from the text Pulumi hands a program: a string as it is,
// anything else as JSON (an object, a list, a number or a boolean), or as a plain scalar.
func decodeTopLevel(ps *Problems, key, text string, dst reflect.Value) {
	if dst.Kind() == reflect.String {
		dst.SetString(text)
		return
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		raw = text // a scalar written as plain text, such as 4 or true
	}
	decodeValue(ps, key, raw, dst)
}

func scalarText(raw any) (string, bool) {
	switch v := raw.(type) {
	case json.Number:
		return v.String(), true
	case string:
		return v, true
	}
	return "", false
}

// structFields maps each json name of a struct type to its field index.
func structFields(t reflect.Type) map[string]int {
	fields := map[string]int{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	return fields
}

func describeJSON(raw any) string {
	switch v := raw.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(abbreviate(v))
	default:
		return fmt.Sprint(v)
	}
}

func abbreviate(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

func join(key, name string) string {
	if key == "" {
		return name
	}
	return key + "." + name
}
