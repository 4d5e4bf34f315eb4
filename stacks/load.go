package stacks

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Source is the raw stack configuration as the Pulumi engine hands it to the
// program: full keys (`<project>:<key>`) mapped to their values (objects as
// JSON text), plus the keys that hold secrets.
type Source struct {
	Project    string
	Values     map[string]string
	SecretKeys []string
	// PlainInFile holds the values the stack file stores in plain text, by
	// key path (`nodes.workers[1].rescue.password`), when it was read
	// (ReadStackFile); nil otherwise. A credential in it with the value the
	// engine handed over is reported even when its top-level key holds
	// another, secure value.
	PlainInFile map[string]string
}

// CaptureSource returns a pulumi.RunOption that records the run's config into
// dst. The Pulumi Go SDK offers no way to list config keys from a Context, and
// listing them is the only way to report unknown keys (typos) as errors.
// Run options see the RunInfo after the SDK has read the engine's config, and
// in tests after the mock config has been set, so one code path serves both.
func CaptureSource(dst *Source) pulumi.RunOption {
	return func(ri *pulumi.RunInfo) {
		dst.Project = ri.Project
		dst.Values = ri.Config
		dst.SecretKeys = ri.ConfigSecretKeys
		// Best effort: without the stack file (config from elsewhere)
		// credentials are checked per top-level key, as the engine marks
		// them.
		_ = dst.ReadStackFile(ri.RootDirectory, ri.Stack)
	}
}

func (s Source) isSecret(fullKey string) bool { return slices.Contains(s.SecretKeys, fullKey) }

// Load reads, defaults and validates the stack configuration. The returned
// Diagnostics hold every error and warning; the Config is usable only when
// there are no errors.
func Load(src Source) (*Config, *Diagnostics) {
	d := &Diagnostics{}
	cfg := &Config{}
	decodeSource(d, src, cfg)
	for i := range cfg.Hosts {
		cfg.Hosts[i].servers = d.givenObject(fmt.Sprintf("hosts[%d].vps", i))
	}
	failed := problemPaths(d.Errors)
	creds := checkCredentials(d, src, cfg)
	failed = append(failed, creds.failed...)
	errorsFrom, warningsFrom := len(d.Errors), len(d.Warnings)
	expandPools(&cfg.Nodes)
	applyDefaults(cfg)
	validate(d, cfg)
	checkConfigSize(d, src)
	dropFollowUps(d, errorsFrom, warningsFrom, failed)
	scrubSecrets(d, creds.secrets)
	d.secrets = creds.secrets
	if !d.HasErrors() {
		resolve(cfg)
	}
	return cfg, d
}

func decodeSource(d *Diagnostics, src Source, cfg *Config) {
	prefix := src.Project + ":"
	root := reflect.ValueOf(cfg).Elem()
	rootType := root.Type()
	known := fieldNames(rootType)

	keys := make([]string, 0, len(src.Values))
	for k := range src.Values {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	for _, full := range keys {
		key, ok := strings.CutPrefix(full, prefix)
		if !ok {
			continue // other namespaces (provider settings) are not ours to judge
		}
		i := fieldIndex(rootType, key)
		if i < 0 {
			d.errorf(key, "unknown key%s", suggest(key, known))
			continue
		}
		field := root.Field(i)
		raw := src.Values[full]
		if field.Kind() == reflect.String {
			// Plain strings arrive as they are, not as JSON.
			field.SetString(raw)
			continue
		}
		v, err := parseJSON(raw)
		if err != nil {
			d.errorf(key, "must be an object, got %s", describeRawFor(field.Type(), src.isSecret(full), raw))
			continue
		}
		decodeInto(d, key, v, field)
	}
}

func fieldIndex(t reflect.Type, name string) int {
	for i := range t.NumField() {
		if jsonName(t.Field(i)) == name {
			return i
		}
	}
	return -1
}

// walkSecrets calls fn for every Secret field under v.
func walkSecrets(path string, v reflect.Value, fn func(path string, s Secret)) {
	switch {
	case v.Type() == secretType:
		fn(path, v.Interface().(Secret))
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if name := jsonName(v.Type().Field(i)); name != "" {
				walkSecrets(join(path, name), v.Field(i), fn)
			}
		}
	case v.Kind() == reflect.Slice:
		for i := range v.Len() {
			walkSecrets(fmt.Sprintf("%s[%d]", path, i), v.Index(i), fn)
		}
	}
}

// SourceFromConfigJSON turns `pulumi config --show-secrets --json` output
// (the Automation API's ConfigMap has the same shape) into the config source
// the program sees.
func SourceFromConfigJSON(raw []byte) (Source, error) {
	var entries map[string]struct {
		Value  string `json:"value"`
		Secret bool   `json:"secret"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return Source{}, fmt.Errorf("unable to read the stack config (not the JSON `pulumi config --json` prints): %w", err)
	}
	src := Source{Values: map[string]string{}}
	for k, e := range entries {
		project, _, ok := strings.Cut(k, ":")
		if !ok {
			continue
		}
		if strings.HasSuffix(k, ":platform") {
			src.Project = project
		}
		src.Values[k] = e.Value
		if e.Secret {
			src.SecretKeys = append(src.SecretKeys, k)
		}
	}
	if src.Project == "" {
		return src, errors.New("the stack has no platform key: is it this project's stack?")
	}
	return src, nil
}
