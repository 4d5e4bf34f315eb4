package stacks

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The decoder below replaces encoding/json's Unmarshal for the stack config
// because the config needs what json cannot give: every problem at once, each
// tied to its key path, unknown keys as errors with a suggestion, and keys
// matched exactly (json matches `vmid` to `VMID` case-insensitively, which
// would hide a typo that Pulumi would also not flag).

var (
	secretType = reflect.TypeFor[Secret]()
	patchType  = reflect.TypeFor[Patch]()
	anyMapType = reflect.TypeFor[map[string]any]()
)

// parseJSON decodes a config value that must be JSON (objects arrive from the
// Pulumi CLI as JSON text) keeping numbers exact.
func parseJSON(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the value")
	}
	return v, nil
}

// decodeInto fills dst (a pointer's Elem) from a generic JSON value, reporting
// problems under path.
func decodeInto(d *Diagnostics, path string, v any, dst reflect.Value) {
	if v == nil {
		return // null and absent keys keep the zero value; defaults fill it later
	}
	t := dst.Type()
	describe := describerFor(t) // never the text of a credential
	switch t {
	case secretType:
		s, ok := v.(string)
		if !ok {
			d.errorf(path, "must be a string, got %s", describe(v))
			return
		}
		dst.Set(reflect.ValueOf(NewSecret(s)))
		return
	case patchType:
		decodePatch(d, path, v, dst)
		return
	case anyMapType:
		m, ok := v.(map[string]any)
		if !ok {
			d.errorf(path, "must be an object, got %s", describe(v))
			return
		}
		dst.Set(reflect.ValueOf(normalize(m)))
		return
	}

	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			d.errorf(path, "must be an object, got %s", describe(v))
			return
		}
		d.noteObject(path)
		decodeStruct(d, path, m, dst)
	case reflect.Pointer:
		elem := reflect.New(t.Elem())
		before := len(d.Errors)
		decodeInto(d, path, v, elem.Elem())
		if len(d.Errors) == before {
			dst.Set(elem)
		}
	case reflect.Map:
		// A map of plain values by key (a node's labels): each value is
		// decoded at path["key"].
		m, ok := v.(map[string]any)
		if !ok || t.Key().Kind() != reflect.String {
			d.errorf(path, "must be an object, got %s", describe(v))
			return
		}
		out := reflect.MakeMapWithSize(t, len(m))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			elem := reflect.New(t.Elem()).Elem()
			decodeInto(d, fmt.Sprintf("%s[%q]", path, k), m[k], elem)
			out.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), elem)
		}
		dst.Set(out)
	case reflect.Slice:
		items, ok := v.([]any)
		if !ok {
			d.errorf(path, "must be a list, got %s", describe(v))
			return
		}
		out := reflect.MakeSlice(t, len(items), len(items))
		for i, item := range items {
			decodeInto(d, fmt.Sprintf("%s[%d]", path, i), item, out.Index(i))
		}
		dst.Set(out)
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			d.errorf(path, "must be a string, got %s (quote it in YAML)", describe(v))
			return
		}
		dst.SetString(s)
	case reflect.Int:
		n, ok := toInt(v)
		if !ok {
			d.errorf(path, "must be a whole number, got %s", describe(v))
			return
		}
		dst.SetInt(n)
		if n == 0 {
			d.noteExplicitZero(path)
		}
	case reflect.Bool:
		switch b := v.(type) {
		case bool:
			dst.SetBool(b)
		case string:
			if parsed, err := strconv.ParseBool(b); err == nil && (b == "true" || b == "false") {
				dst.SetBool(parsed)
				return
			}
			d.errorf(path, "must be true or false, got %s", describe(v))
		default:
			d.errorf(path, "must be true or false, got %s", describe(v))
		}
	default:
		// A programming error: a field type the decoder does not know.
		panic(fmt.Sprintf("stacks: cannot decode %s into %s", path, t))
	}
}

func decodeStruct(d *Diagnostics, path string, m map[string]any, dst reflect.Value) {
	t := dst.Type()
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		if name := jsonName(t.Field(i)); name != "" {
			fields[name] = i
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		i, ok := fields[k]
		if !ok {
			d.errorf(join(path, k), "unknown key%s", suggest(k, fieldNames(t)))
			continue
		}
		decodeInto(d, join(path, k), m[k], dst.Field(i))
	}
}

func decodePatch(d *Diagnostics, path string, v any, dst reflect.Value) {
	switch p := v.(type) {
	case string:
		if strings.TrimSpace(p) == "" {
			d.errorf(path, "patch is empty")
			return
		}
		dst.Set(reflect.ValueOf(Patch{YAML: p}))
	case map[string]any:
		out, err := yaml.Marshal(normalize(p))
		if err != nil {
			d.errorf(path, "cannot render patch as YAML: %v", err)
			return
		}
		dst.Set(reflect.ValueOf(Patch{YAML: string(out)}))
	default:
		d.errorf(path, "must be an object or a YAML string, got %s", describe(v))
	}
}

// normalize turns json.Numbers into int64 or float64 so that values handed on
// (Helm values, patches) have ordinary Go types.
func normalize(v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, item := range v {
		out[k] = normalizeValue(item)
	}
	return out
}

func normalizeValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		return normalize(x)
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = normalizeValue(item)
		}
		return out
	default:
		return v
	}
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	default:
		return 0, false
	}
}

// describe renders a decoded value for messages: short, typed, never huge.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", truncate(x))
	case json.Number:
		return "the number " + x.String()
	case bool:
		return fmt.Sprintf("the boolean %t", x)
	case []any:
		return fmt.Sprintf("a list of %d items", len(x))
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func truncate(s string) string {
	const maxLen = 60
	if len(s) <= maxLen {
		return s
	}
	return s[:maxLen] + "..."
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	if tag == "" || tag == "-" {
		return ""
	}
	name, _, _ := strings.Cut(tag, ",")
	return name
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if n := jsonName(t.Field(i)); n != "" {
			names = append(names, n)
		}
	}
	return names
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest proposes the closest known key for a typo.
func suggest(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
		if dist := levenshtein(strings.ToLower(key), strings.ToLower(k)); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Sprintf(" (known keys: %s)", strings.Join(known, ", "))
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
