package stacks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The engine tells a program only which top-level keys hold a secret
// somewhere (Pulumi marks the whole key when one value in it was set with
// `--secret --path`), and hands it every value decrypted. How each value is
// stored is in the stack file only: a value set with --secret is a mapping
// `{secure: <ciphertext>}` there, anything else is plain text. Reading it
// lets Load check every credential on its own.

// PlainValuesFromStackFile returns the values under project's keys that the
// stack file raw (Pulumi.<stack>.yaml) stores in plain text, by key path
// (`nodes.workers[1].rescue.password`), scalars as their text.
func PlainValuesFromStackFile(raw []byte, project string) (map[string]string, error) {
	var doc struct {
		Config yaml.Node `yaml:"config"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("unable to read the stack file (not YAML): %w", err)
	}
	out := map[string]string{}
	cfg := resolveAlias(&doc.Config)
	if cfg.Kind == 0 {
		return out, nil // no config section
	}
	if cfg.Kind != yaml.MappingNode {
		return nil, errors.New("the stack file's config is not a mapping")
	}
	for i := 0; i+1 < len(cfg.Content); i += 2 {
		key, ok := strings.CutPrefix(cfg.Content[i].Value, project+":")
		if !ok {
			continue // other namespaces (provider settings)
		}
		collectPlain(out, key, cfg.Content[i+1])
	}
	return out, nil
}

func collectPlain(out map[string]string, path string, n *yaml.Node) {
	n = resolveAlias(n)
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag != "!!null" {
			out[path] = n.Value
		}
	case yaml.MappingNode:
		if len(n.Content) == 2 && n.Content[0].Value == "secure" && resolveAlias(n.Content[1]).Kind == yaml.ScalarNode {
			return // stored encrypted
		}
		for _, e := range mappingEntries(n) {
			collectPlain(out, join(path, e.key), e.value)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			collectPlain(out, fmt.Sprintf("%s[%d]", path, i), item)
		}
	}
}

// mappingEntry is one key of a mapping and its value.
type mappingEntry struct {
	key   string
	value *yaml.Node
}

// mappingEntries lists the keys of mapping n as a YAML reader (Pulumi's)
// sees them: its own keys, then the keys its merge keys (`<<: *anchor`, or
// a list of anchors) bring in that it does not set itself, the first merged
// mapping winning. Without this, a credential merged in from an anchor
// would sit under a path ending in `<<` that names no key, and its plain
// text would go unnoticed.
func mappingEntries(n *yaml.Node) []mappingEntry {
	var own, merged []mappingEntry
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!merge" {
			own = append(own, mappingEntry{k.Value, v})
			continue
		}
		v = resolveAlias(v)
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, src := range sources {
			if src = resolveAlias(src); src.Kind == yaml.MappingNode {
				merged = append(merged, mappingEntries(src)...)
			}
		}
	}
	seen := make(map[string]bool, len(own)+len(merged))
	out := make([]mappingEntry, 0, len(own)+len(merged))
	for _, e := range slices.Concat(own, merged) {
		if !seen[e.key] {
			seen[e.key] = true
			out = append(out, e)
		}
	}
	return out
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// StackFilePath is where Pulumi keeps the config of stack for the project
// whose Pulumi.yaml is in root: Pulumi.<stack>.yaml next to it, or in its
// stackConfigDir.
func StackFilePath(root, stack string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(root, "Pulumi.yaml")) //nolint:gosec // the project's own file
	if err != nil {
		return "", err
	}
	var proj struct {
		StackConfigDir string `yaml:"stackConfigDir"`
	}
	if err := yaml.Unmarshal(raw, &proj); err != nil {
		return "", fmt.Errorf("unable to read %s: %w", filepath.Join(root, "Pulumi.yaml"), err)
	}
	// A fully qualified stack (org/project/stack) has its short name in the
	// file name; Pulumi turns any '/' left into '-'.
	name := stack
	if parts := strings.Split(stack, "/"); len(parts) == 3 {
		name = parts[2]
	}
	file := "Pulumi." + strings.ReplaceAll(name, "/", "-") + ".yaml"
	dir := root
	if proj.StackConfigDir != "" {
		dir = filepath.Join(root, proj.StackConfigDir)
	}
	return filepath.Join(dir, file), nil
}

// ReadStackFile fills s.PlainInFile from the stack file of stack in the
// project at root. Without a readable stack file (config from elsewhere, a
// test run) it leaves s as it is: the top-level keys are all it checks then.
func (s *Source) ReadStackFile(root, stack string) error {
	if root == "" || stack == "" {
		return nil
	}
	path, err := StackFilePath(root, stack)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(path) //nolint:gosec // the stack's own file
	if err != nil {
		return err
	}
	plain, err := PlainValuesFromStackFile(raw, s.Project)
	if err != nil {
		return fmt.Errorf("unable to read %s: %w", path, err)
	}
	s.PlainInFile = plain
	return nil
}
