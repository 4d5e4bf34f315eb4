// Package stackstest loads stack files the way the Pulumi CLI does, for tests:
// Pulumi's own project and stack loaders, its project-config validation and
// defaults, and secrets set as `pulumi config set --secret --path` sets them.
package stackstest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/encoding"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/stacks"
)

// Example stack files at the repository root.
const (
	ProxmoxExample   = "Pulumi.proxmox-homelab.yaml.example"
	VPSExample       = "Pulumi.vps-prod.yaml.example"
	LocalExample     = "Pulumi.local.yaml.example"
	GitOpsExample    = "Pulumi.homelab-gitops.yaml.example"
	MultiHostExample = "Pulumi.multi-host.yaml.example"
)

// ExampleStack is an example stack file and the stack name the tests run
// it as (the name its tags and MACs are derived from).
type ExampleStack struct{ File, Stack string }

// Examples are the example stacks.
var Examples = []ExampleStack{{ProxmoxExample, "proxmox-homelab"}, {VPSExample, "vps-prod"}, {LocalExample, "local"}, {GitOpsExample, "homelab-gitops"}, {MultiHostExample, "multi-host"}}

// ExampleSecrets are the secrets a user sets after copying each example.
var ExampleSecrets = map[string]map[string]string{
	ProxmoxExample: {"proxmox.apiTokenSecret": "0b9e4a52-3c1f-4b7e-9a2d-6f8e1c0d5a47"},
	VPSExample:     {"nodes.controlPlanes[0].rescue.password": "rescue-pw-Xq81"},
	MultiHostExample: {
		"proxmox.apiTokenSecret":                 "0b9e4a52-3c1f-4b7e-9a2d-6f8e1c0d5a47",
		"hosts[0].proxmox.apiTokenSecret":        "7c2d9e41-5a3b-4f60-8e1d-2b9c0a7f6e35",
		"nodes.controlPlanes[2].rescue.password": "rescue-pw-Hz42",
	},
	GitOpsExample: {
		"proxmox.apiTokenSecret":          "0b9e4a52-3c1f-4b7e-9a2d-6f8e1c0d5a47",
		"gitops.sopsAgeKey":               "# created: 2026-11-29T04:00:00Z\n# public key: age1example\nAGE-SECRET-KEY-19HP02GC6CUTZ0EKD0F08F25D0WH42TAW5XTRWQ6DDTA6C2PRYPKSW7XZEQ\n",
		"gitops.repository.sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nZXhhbXBsZSBkZXBsb3kga2V5IG9mIHRoZSB0ZXN0cw==\n-----END OPENSSH PRIVATE KEY-----\n",
	},
}

// applyProjectConfig checks a stack's config against the project's config
// block and adds the project's defaults, as the CLI does before it runs the
// program: a key without a default must be set, a typed key must hold a value
// of its type (Pulumi's own ValidateConfigValue), a secret key must be
// encrypted. The CLI's function for it (ValidateStackConfigAndApplyProjectConfig)
// moved from the SDK into the CLI's pkg module in 3.259, which this module
// does not depend on; the environment (ESC) part is left out: the examples
// import no environment.
func applyProjectConfig(stackName string, proj *workspace.Project, cfg config.Map, dec config.Decrypter) error {
	for _, name := range slices.Sorted(maps.Keys(proj.Config)) {
		typ := proj.Config[name]
		key, err := config.ParseKey(proj.Name.String() + ":" + name)
		if err != nil {
			return err
		}
		value, found, err := cfg.Get(key, true)
		if err != nil {
			return err
		}
		if !found {
			def := typ.Default
			if def == nil {
				def = typ.Value
			}
			if def == nil {
				return fmt.Errorf("stack '%s' is missing configuration value '%s'", stackName, name)
			}
			encoded, err := json.Marshal(def)
			if err != nil {
				return err
			}
			var v config.Value
			switch d := def.(type) {
			case string:
				v = config.NewValue(d)
			case map[string]any, []any:
				v = config.NewObjectValue(string(encoded))
			default:
				v = config.NewValue(string(encoded))
			}
			if err := cfg.Set(key, v, true); err != nil {
				return err
			}
			continue
		}
		if typ.Secret && !value.Secure() {
			return fmt.Errorf("stack '%s' with configuration key '%s' must be encrypted as it's secret", stackName, name)
		}
		if !typ.IsExplicitlyTyped() {
			continue
		}
		plain, err := value.Value(dec)
		if err != nil {
			return err
		}
		var content any = plain
		if value.Object() {
			if err := json.Unmarshal([]byte(plain), &content); err != nil {
				return err
			}
		}
		if !workspace.ValidateConfigValue(*typ.Type, typ.Items, content) {
			return fmt.Errorf("stack '%s' with configuration key '%s' must be of type '%s'",
				stackName, name, workspace.InferFullTypeName(*typ.Type, typ.Items))
		}
	}
	return nil
}

// RepoRoot finds the repository's root: the directory holding go.mod and
// Pulumi.yaml (the provider's own module, below it, has no Pulumi.yaml).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, errMod := os.Stat(filepath.Join(dir, "go.mod"))
		_, errProject := os.Stat(filepath.Join(dir, "Pulumi.yaml"))
		if errMod == nil && errProject == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod and Pulumi.yaml not found above the test's directory")
		}
		dir = parent
	}
}

// Project loads Pulumi.yaml with Pulumi's loader (which checks its schema).
func Project(t testing.TB) *workspace.Project {
	t.Helper()
	proj, err := workspace.LoadProject(filepath.Join(RepoRoot(t), "Pulumi.yaml"))
	if err != nil {
		t.Fatalf("load Pulumi.yaml: %v", err)
	}
	return proj
}

// StackSource loads the stack file at path (relative to the repo root), sets
// the given secrets by config path, validates it against Pulumi.yaml and
// returns the config as the engine hands it to the program.
func StackSource(t testing.TB, path string, secrets map[string]string) stacks.Source {
	t.Helper()
	proj := Project(t)
	sink := diag.DefaultSink(io.Discard, io.Discard, diag.FormatOptions{Color: colors.Never})
	full := path
	if !filepath.IsAbs(path) {
		full = filepath.Join(RepoRoot(t), path)
	}
	raw, err := os.ReadFile(full) //nolint:gosec // test helper reading the repo's own stack files
	if err != nil {
		t.Fatal(err)
	}
	// LoadProjectStackBytes with the YAML marshaler is what LoadProjectStack
	// does for a .yaml file; the examples end in .example so that Pulumi
	// never mistakes them for a stack.
	ps, err := workspace.LoadProjectStackBytes(sink, proj, raw, full, encoding.YAML)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	crypter := testCrypter()
	ctx := context.Background()
	for keyPath, value := range secrets {
		key, err := config.ParseKey(proj.Name.String() + ":" + keyPath)
		if err != nil {
			t.Fatalf("secret key %s: %v", keyPath, err)
		}
		ciphertext, err := crypter.EncryptValue(ctx, value)
		if err != nil {
			t.Fatal(err)
		}
		if err := ps.Config.Set(key, config.NewSecureValue(ciphertext), true); err != nil {
			t.Fatalf("set secret %s: %v", keyPath, err)
		}
	}
	stackName := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "Pulumi."), ".yaml.example")
	if err := applyProjectConfig(stackName, proj, ps.Config, crypter); err != nil {
		t.Fatalf("Pulumi rejects %s: %v", path, err)
	}
	plain, err := ps.Config.Decrypt(crypter)
	if err != nil {
		t.Fatal(err)
	}
	src := stacks.Source{Project: proj.Name.String(), Values: map[string]string{}}
	for k, v := range plain {
		src.Values[k.String()] = v
	}
	for _, k := range ps.Config.SecureKeys() {
		src.SecretKeys = append(src.SecretKeys, k.String())
	}
	// The stack file as `pulumi config set --secret --path` leaves it: the
	// program reads how each value is stored from there.
	saved, err := encoding.YAML.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	if src.PlainInFile, err = stacks.PlainValuesFromStackFile(saved, src.Project); err != nil {
		t.Fatal(err)
	}
	return src
}

// testCrypter encrypts and decrypts the secrets StackSource sets. Its key is
// derived once per test binary: Pulumi's passphrase derivation (PBKDF2, a
// million rounds) costs about 0.2 s of CPU, and the suite loads stack files
// hundreds of times. The crypter holds only the key, so sharing it between
// parallel tests is safe.
var testCrypter = sync.OnceValue(func() config.Crypter {
	return config.NewSymmetricCrypterFromPassphrase("stacktest", []byte("0123456789abcdef"))
})

// Example loads an example stack file with its secrets set.
func Example(t testing.TB, file string) stacks.Source {
	t.Helper()
	return StackSource(t, file, ExampleSecrets[file])
}

// WithConfig is a pulumi.RunOption that hands src to a mocked program run.
func WithConfig(src stacks.Source) pulumi.RunOption {
	return func(ri *pulumi.RunInfo) {
		ri.Config = src.Values
		ri.ConfigSecretKeys = src.SecretKeys
	}
}

// ConfigJSON renders a source the way `pulumi config --show-secrets --json`
// prints a stack's config.
func ConfigJSON(t testing.TB, src stacks.Source) []byte {
	t.Helper()
	out := map[string]any{}
	for k, v := range src.Values {
		out[k] = map[string]any{"value": v, "secret": slices.Contains(src.SecretKeys, k)}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		t.Fatalf("config JSON: %v", err)
	}
	return raw
}

// EditSection returns a copy of src whose top-level key section (e.g.
// "proxmox") is changed by edit, as editing that block of the stack file
// would.
func EditSection(t testing.TB, src stacks.Source, section string, edit func(map[string]any)) stacks.Source {
	t.Helper()
	key := src.Project + ":" + section
	obj := map[string]any{}
	if raw, ok := src.Values[key]; ok {
		if err := json.Unmarshal([]byte(raw), &obj); err != nil {
			t.Fatalf("%s is not an object: %v", key, err)
		}
	}
	edit(obj)
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := stacks.Source{Project: src.Project, Values: maps.Clone(src.Values), SecretKeys: slices.Clone(src.SecretKeys)}
	out.Values[key] = string(b)
	return out
}

// KeyDocs are the stack keys' doc comments, read from the stacks package's
// source in this repository.
func KeyDocs(t testing.TB) stacks.KeyDocs {
	t.Helper()
	docs, err := stacks.ReadKeyDocs(filepath.Join(RepoRoot(t), "stacks"))
	if err != nil {
		t.Fatal(err)
	}
	return docs
}
