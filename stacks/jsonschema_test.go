package stacks_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The JSON Schema of the stack file (for editors) is generated from the
// struct tags, like the reference: `make docs` writes it, and it is current.
func TestStackFileSchemaIsCurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(stackstest.RepoRoot(t), filepath.FromSlash(stacks.SchemaFile))
	want, err := stacks.JSONSchema(stackstest.KeyDocs(t))
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(path, want, 0o644)) //nolint:gosec // the documentation is public
		return
	}
	got, err := os.ReadFile(path) //nolint:gosec // the repository's own file
	require.NoError(t, err, "run `make docs`")
	assert.Equal(t, string(want), string(got), "%s is stale: run `make docs`", stacks.SchemaFile)
	assert.Equal(t, stackstest.Project(t).Name.String(), stacks.Namespace)
}

// compileSchema is the stack file's schema, as an editor's validator reads it.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := stacks.JSONSchema(stackstest.KeyDocs(t))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft7
	require.NoError(t, c.AddResource("stack.json", bytes.NewReader(raw)))
	s, err := c.Compile("stack.json")
	require.NoError(t, err)
	return s
}

// asJSON is a YAML document as the JSON data a validator checks.
func asJSON(t *testing.T, raw string) any {
	t.Helper()
	var doc any
	require.NoError(t, yaml.Unmarshal([]byte(raw), &doc))
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// Both examples pass the schema, with their secrets set as `make secret`
// sets them; a misspelled key, a value of the wrong type, a plain-text
// secret and an unknown platform do not.
func TestTheSchemaChecksStackFiles(t *testing.T) {
	t.Parallel()
	schema := compileSchema(t)
	for _, ex := range stackstest.Examples {
		raw, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), ex.File)) //nolint:gosec // the repository's own files
		require.NoError(t, err)
		doc := asJSON(t, string(raw))
		require.NoError(t, schema.Validate(doc), ex.File)
	}
	secret := `config:
  talos-cluster:platform: proxmox
  talos-cluster:cluster: {name: lab, talosVersion: v1.13.9}
  talos-cluster:proxmox:
    apiTokenSecret:
      secure: v1:abc
  proxmoxve:endpoint: https://elsewhere:8006/
`
	require.NoError(t, schema.Validate(asJSON(t, secret)), "a secret as pulumi stores it; other namespaces are free")
	for name, tc := range map[string]struct{ doc, want string }{
		"misspelled key": {strings.Replace(secret, "talosVersion", "talosVersoin", 1), "talosVersoin"},
		"wrong type":     {strings.Replace(secret, "name: lab", "name: [lab]", 1), "/talos-cluster:cluster/name"},
		"plain secret":   {strings.Replace(secret, "\n      secure: v1:abc", " hunter2", 1), "apiTokenSecret"},
		"platform":       {strings.Replace(secret, "platform: proxmox", "platform: aws", 1), "talos-cluster:platform"},
	} {
		var verr *jsonschema.ValidationError
		require.ErrorAs(t, schema.Validate(asJSON(t, tc.doc)), &verr, name)
		assert.Contains(t, verr.GoString(), tc.want, name)
	}
}
