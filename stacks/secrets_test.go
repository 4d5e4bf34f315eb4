package stacks_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// A private key as a user might paste it where it does not belong; its body
// is what must never show up in a message.
const (
	leakedKeyBody = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
	leakedKey     = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + leakedKeyBody + "\n-----END OPENSSH PRIVATE KEY-----\n"
)

// secretLocation is one key that holds a credential, in a base config that
// is valid with the right value there.
type secretLocation struct {
	// path is the key path; typePath the same with list indexes left out,
	// as secretTypePaths lists them.
	path, typePath string
	// required: an absent value is an error ("is required").
	required bool
	// base is the config, with its credential keys marked secret.
	base func() keys
	// set puts v at path (nil deletes the key).
	set func(k keys, v any)
	// source is how the engine hands base over: its top-level key secret.
	source func(k keys) stacks.Source
	// top is the top-level key.
	top string
}

func vpsKeysWithWorker() keys {
	k := vpsKeys()
	at(k, "nodes")["workers"] = []any{obj{
		"name": "node-1", "ip": "203.0.113.11", "rescue": obj{"password": rescuePW + "-w", "hostKey": rescueHostKey},
	}}
	return k
}

// exampleRecipient is the age public key of age's README.
const exampleRecipient = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"

// proxmoxKeysWithBackup has backups to an S3-compatible store with
// credentials of its own.
func proxmoxKeysWithBackup() keys {
	k := proxmoxKeys()
	k["backup"] = obj{
		"target":     "s3://backups/lab?endpoint=https://s3.example.com&region=eu-1",
		"recipients": []any{exampleRecipient},
		"s3":         obj{"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3-S3cr3t-key"},
	}
	return k
}

// proxmoxKeysWithCSI installs the Proxmox CSI plugin with a token of the
// user's.
func proxmoxKeysWithCSI() keys {
	k := proxmoxKeys()
	k["storage"] = obj{"proxmoxCsi": obj{"datastore": "local-zfs", "tokenId": "csi@pve!csi", "tokenSecret": "csi-S3cr3t-token"}}
	return k
}

// gitopsKeys hand the cluster to Argo CD over https with a token and a
// SOPS age key; gitopsSSHKeys over SSH with a deploy key.
func gitopsKeys() keys {
	k := proxmoxKeys()
	k["gitops"] = obj{
		"repository": obj{"url": "https://git.example.com/lab/gitops.git", "username": "lab", "password": "git-S3cr3t-token"},
		"sopsAgeKey": exampleAgeIdentity,
	}
	return k
}

func gitopsSSHKeys() keys {
	k := proxmoxKeys()
	k["gitops"] = obj{"repository": obj{"url": "git@git.example.com:lab/gitops.git", "sshPrivateKey": leakedKey}}
	return k
}

// exampleAgeIdentity is an age identity made for these tests.
const exampleAgeIdentity = "# created: 2026-11-29\nAGE-SECRET-KEY-19HP02GC6CUTZ0EKD0F08F25D0WH42TAW5XTRWQ6DDTA6C2PRYPKSW7XZEQ\n"

func setOrDelete(m obj, key string, v any) {
	if v == nil {
		delete(m, key)
		return
	}
	m[key] = v
}

func secretLocations() []secretLocation {
	return []secretLocation{
		{
			path: "proxmox.apiTokenSecret", typePath: "proxmox.apiTokenSecret", required: true, top: "proxmox",
			base: proxmoxKeys, source: proxmoxSource,
			set: func(k keys, v any) { setOrDelete(at(k, "proxmox"), "apiTokenSecret", v) },
		},
		{
			path: "proxmox.ssh.privateKey", typePath: "proxmox.ssh.privateKey", top: "proxmox",
			base: proxmoxKeys, source: proxmoxSource,
			set: func(k keys, v any) { setOrDelete(at(k, "proxmox", "ssh"), "privateKey", v) },
		},
		{
			path: "hosts[0].proxmox.apiTokenSecret", typePath: "hosts[].proxmox.apiTokenSecret", required: true, top: "hosts",
			base: multiHostKeys, source: multiHostSource,
			set: func(k keys, v any) { setOrDelete(at(k, "hosts", 0, "proxmox"), "apiTokenSecret", v) },
		},
		{
			path: "hosts[0].proxmox.ssh.privateKey", typePath: "hosts[].proxmox.ssh.privateKey", top: "hosts",
			base: multiHostKeys, source: multiHostSource,
			set: func(k keys, v any) { setOrDelete(at(k, "hosts", 0, "proxmox", "ssh"), "privateKey", v) },
		},
		{
			path: "backup.s3.secretAccessKey", typePath: "backup.s3.secretAccessKey", required: true, top: "backup", // with accessKeyId
			base: proxmoxKeysWithBackup, source: func(k keys) stacks.Source { return k.source("proxmox", "backup") },
			set: func(k keys, v any) { setOrDelete(at(k, "backup", "s3"), "secretAccessKey", v) },
		},
		{
			path: "storage.proxmoxCsi.tokenSecret", typePath: "storage.proxmoxCsi.tokenSecret", top: "storage", // the component pairs it with tokenId
			base: proxmoxKeysWithCSI, source: func(k keys) stacks.Source { return k.source("proxmox", "storage") },
			set: func(k keys, v any) { setOrDelete(at(k, "storage", "proxmoxCsi"), "tokenSecret", v) },
		},
		{
			path: "gitops.repository.password", typePath: "gitops.repository.password", top: "gitops", // the component pairs it with username
			base: gitopsKeys, source: func(k keys) stacks.Source { return k.source("proxmox", "gitops") },
			set: func(k keys, v any) { setOrDelete(at(k, "gitops", "repository"), "password", v) },
		},
		{
			path: "gitops.repository.sshPrivateKey", typePath: "gitops.repository.sshPrivateKey", top: "gitops",
			base: gitopsSSHKeys, source: func(k keys) stacks.Source { return k.source("proxmox", "gitops") },
			set: func(k keys, v any) { setOrDelete(at(k, "gitops", "repository"), "sshPrivateKey", v) },
		},
		{
			path: "gitops.sopsAgeKey", typePath: "gitops.sopsAgeKey", top: "gitops",
			base: gitopsKeys, source: func(k keys) stacks.Source { return k.source("proxmox", "gitops") },
			set: func(k keys, v any) { setOrDelete(at(k, "gitops"), "sopsAgeKey", v) },
		},
		{
			path: "nodes.controlPlanes[0].rescue.password", typePath: "nodes.controlPlanes[].rescue.password", required: true, top: "nodes",
			base: vpsKeysWithWorker, source: vpsSource,
			set: func(k keys, v any) { setOrDelete(at(k, "nodes", "controlPlanes", 0, "rescue"), "password", v) },
		},
		{
			path: "nodes.workers[0].rescue.password", typePath: "nodes.workers[].rescue.password", required: true, top: "nodes",
			base: vpsKeysWithWorker, source: vpsSource,
			set: func(k keys, v any) { setOrDelete(at(k, "nodes", "workers", 0, "rescue"), "password", v) },
		},
	}
}

// secretTypePaths lists the key paths of every field tagged secret:"true".
func secretTypePaths(path string, t reflect.Type) []string {
	var out []string
	switch t.Kind() {
	case reflect.Slice, reflect.Pointer:
		suffix := ""
		if t.Kind() == reflect.Slice {
			suffix = "[]"
		}
		return secretTypePaths(path+suffix, t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			if f.Tag.Get("secret") == "true" {
				out = append(out, p)
				continue
			}
			out = append(out, secretTypePaths(p, f.Type)...)
		}
	}
	return out
}

func TestEverySecretKeyIsInTheLeakTests(t *testing.T) {
	t.Parallel()
	var covered []string
	for _, l := range secretLocations() {
		covered = append(covered, l.typePath)
		src := l.source(l.base())
		_, d := stacks.Load(src)
		require.NoError(t, d.Err(), "the base config of %s", l.path)
	}
	// A pool cannot be rented servers (TestPoolsAreRefusedWhatTheirNodesCannotShare):
	// its rescue password is refused, never used.
	paths := slices.DeleteFunc(secretTypePaths("", reflect.TypeFor[stacks.Config]()), func(p string) bool { return strings.HasPrefix(p, "nodes.pools[]") })
	assert.ElementsMatch(t, paths, covered,
		"every secret:\"true\" field needs a location in secretLocations")
}

// wrongValue is a value of the wrong kind for a credential, with the text
// that must not show up in any message.
type wrongValue struct {
	name    string
	value   any
	secret  string // "" for null and booleans, which carry no text
	wantMsg string
}

func wrongValues() []wrongValue {
	return []wrongValue{
		{"number", 918273645546372819, "918273645546372819", "must be a string, got a number"},
		{"float", 3.14159265358979, "3.14159265358979", "must be a string, got a number"},
		{"boolean", true, "", "must be a string, got a boolean"},
		{"list", []any{"S3cr3t-in-a-list"}, "S3cr3t-in-a-list", "must be a string, got a list"},
		{"object", obj{"value": "S3cr3t-in-an-object"}, "S3cr3t-in-an-object", "must be a string, got an object"},
	}
}

// assertNoLeak fails when any message of a load shows secret.
func assertNoLeak(t *testing.T, d *stacks.Diagnostics, secrets ...string) {
	t.Helper()
	var all []string
	for _, p := range slices.Concat(d.Errors, d.Warnings) {
		all = append(all, p.String())
	}
	if err := d.Err(); err != nil {
		all = append(all, err.Error())
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		for _, msg := range all {
			assert.NotContains(t, msg, s)
		}
	}
}

// errorsAt returns the error messages at path.
func errorsAt(d *stacks.Diagnostics, path string) []string {
	var out []string
	for _, p := range d.Errors {
		if p.Path == path {
			out = append(out, p.Message)
		}
	}
	return out
}

func TestSecretsOfTheWrongKindAreNeverEchoed(t *testing.T) {
	t.Parallel()
	for _, l := range secretLocations() {
		for _, w := range wrongValues() {
			t.Run(l.path+"/"+w.name, func(t *testing.T) {
				t.Parallel()
				k := l.base()
				l.set(k, w.value)
				_, d := stacks.Load(l.source(k))
				assertNoLeak(t, d, w.secret)
				assert.Equal(t, []string{w.wantMsg}, errorsAt(d, l.path), "one message, not also \"is required\"")
			})
		}
		t.Run(l.path+"/null", func(t *testing.T) {
			t.Parallel()
			k := l.base()
			l.set(k, nil)
			_, d := stacks.Load(l.source(k))
			msgs := errorsAt(d, l.path)
			if !l.required {
				assert.Empty(t, msgs)
				return
			}
			require.Len(t, msgs, 1)
			assert.Contains(t, msgs[0], "is required")
		})
		// A plain string where a secure value is expected: in a key that
		// is not secret at all, and next to another key's secure value.
		const plain = "S3cr3t-plain-text-value"
		t.Run(l.path+"/plain string, key not secret", func(t *testing.T) {
			t.Parallel()
			k := l.base()
			l.set(k, plain)
			d := loadOf(k.source())
			assertNoLeak(t, d, plain)
			assert.Contains(t, errorsAt(d, l.path), "is stored in plain text; set it with `pulumi config set --secret --path '"+l.path+"' <value>`")
		})
		t.Run(l.path+"/plain string next to a secure value", func(t *testing.T) {
			t.Parallel()
			k := l.base()
			l.set(k, plain)
			src := l.source(k)
			src.PlainInFile = map[string]string{l.path: plain}
			d := loadOf(src)
			assertNoLeak(t, d, plain)
			assert.Contains(t, errorsAt(d, l.path), "is stored in plain text; set it with `pulumi config set --secret --path '"+l.path+"' <value>`")
		})
		t.Run(l.path+"/secure in the stack file", func(t *testing.T) {
			t.Parallel()
			k := l.base()
			l.set(k, plain)
			src := l.source(k)
			src.PlainInFile = map[string]string{l.path: "an older value of another file"}
			d := loadOf(src)
			assertNoLeak(t, d, plain)
			for _, msg := range errorsAt(d, l.path) {
				assert.NotContains(t, msg, "plain text", "a file that does not match what the engine handed over proves nothing")
			}
		})
	}
}

func loadOf(src stacks.Source) *stacks.Diagnostics {
	_, d := stacks.Load(src)
	return d
}

// A credential given one level too high (`rescue: <password>`), or as a
// whole top-level key, is a value of the wrong kind for a key that holds
// credentials: its kind is named, never its text.
func TestCredentialsOneLevelTooHighAreNeverEchoed(t *testing.T) {
	t.Parallel()
	const secret = "S3cr3t-one-level-up"
	for _, tc := range []struct {
		name, path, wantMsg string
		src                 func() stacks.Source
	}{
		{"rescue as a string", "nodes.controlPlanes[0].rescue", "must be an object, got a string", func() stacks.Source {
			k := vpsKeys()
			at(k, "nodes", "controlPlanes", 0)["rescue"] = secret
			return vpsSource(k)
		}},
		{"ssh as a string", "proxmox.ssh", "must be an object, got a string", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["ssh"] = secret
			return proxmoxSource(k)
		}},
		{"node as a string", "nodes.workers[0]", "must be an object, got a string", func() stacks.Source {
			k := vpsKeysWithWorker()
			at(k, "nodes")["workers"] = []any{secret}
			return vpsSource(k)
		}},
		{"proxmox key as a plain string", "proxmox", "must be an object, got a string", func() stacks.Source {
			k := proxmoxKeys()
			k["proxmox"] = secret
			return proxmoxSource(k)
		}},
		{"nodes key as a JSON string", "nodes", "must be an object, got a string", func() stacks.Source {
			k := vpsKeys()
			k["nodes"] = `"` + secret + `"`
			return vpsSource(k)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := loadOf(tc.src())
			assertNoLeak(t, d, secret)
			assert.Equal(t, []string{tc.wantMsg}, errorsAt(d, tc.path))
			for _, p := range d.Errors {
				assert.False(t, strings.HasPrefix(p.Path, tc.path+"."), "no follow-up under %s: %s", tc.path, p)
			}
		})
	}
}

// Credentials in keys that take none: the token secret in the token id
// (as Proxmox shows a new token, or as the API header), a private key pasted
// as a host key or key file, a password in a URL.
func TestCredentialLikeValuesAreNeverEchoed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, wantMsg string
		secrets             []string
		edit                func(k keys)
		secretKey           bool
	}{
		{"token secret in the token id", "proxmox.apiTokenId", "holds the token secret after '=': keep only the token id (root@pam!pulumi) here",
			[]string{tokenSecret}, func(k keys) { at(k, "proxmox")["apiTokenId"] = "root@pam!pulumi=" + tokenSecret }, true},
		{"API token header in the token id", "proxmox.apiTokenId", "keep only the token id (root@pam!pulumi) here",
			[]string{tokenSecret}, func(k keys) { at(k, "proxmox")["apiTokenId"] = "PVEAPIToken=root@pam!pulumi=" + tokenSecret }, true},
		{"malformed token id with a secret", "proxmox.apiTokenId", "keep only the token id (user@realm!tokenname) here",
			[]string{"S3cr3t-token-part"}, func(k keys) { at(k, "proxmox")["apiTokenId"] = "root pam=S3cr3t-token-part" }, true},
		{"token id with a secret in plain text", "proxmox.apiTokenId", "it is stored in plain text in the stack file: replace the token",
			[]string{tokenSecret}, func(k keys) { at(k, "proxmox")["apiTokenId"] = "root@pam!pulumi=" + tokenSecret }, false},
		{"private key as the Proxmox host key", "proxmox.ssh.hostKey", "holds a private key, which this key does not take",
			[]string{leakedKeyBody}, func(k keys) { at(k, "proxmox", "ssh")["hostKey"] = leakedKey }, true},
		{"private key as the key file", "proxmox.ssh.privateKeyFile", "holds a private key, which this key does not take",
			[]string{leakedKeyBody}, func(k keys) { at(k, "proxmox", "ssh")["privateKeyFile"] = leakedKey }, true},
		{"one-line private key as the host key", "proxmox.ssh.hostKey", "holds a private key",
			[]string{"S3cr3tOneLineKeyBody"}, func(k keys) {
				at(k, "proxmox", "ssh")["hostKey"] = "-----BEGIN PRIVATE KEY----- S3cr3tOneLineKeyBody -----END PRIVATE KEY-----"
			}, true},
		{"password in the endpoint URL", "proxmox.endpoint", "",
			[]string{"S3cr3tUrlPw"}, func(k keys) { at(k, "proxmox")["endpoint"] = "http://root:S3cr3tUrlPw@192.168.122.70:8006/" }, true},
		{"password in a broken endpoint URL", "proxmox.endpoint", "",
			[]string{"S3cr3t Url Pw"}, func(k keys) { at(k, "proxmox")["endpoint"] = "https://root:S3cr3t Url Pw@192.168.122.70:8006/" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := proxmoxKeys()
			tc.edit(k)
			src := k.source()
			if tc.secretKey {
				src = proxmoxSource(k)
			}
			d := loadOf(src)
			assertNoLeak(t, d, tc.secrets...)
			msgs := errorsAt(d, tc.path)
			require.Len(t, msgs, 1, "one message at %s: %v", tc.path, d.Err())
			assert.Contains(t, msgs[0], tc.wantMsg)
		})
	}
}

// A VPS node's rescue host key with a private key in it.
func TestPrivateKeyAsRescueHostKeyIsRefusedUnquoted(t *testing.T) {
	t.Parallel()
	k := vpsKeys()
	at(k, "nodes", "controlPlanes", 0, "rescue")["hostKey"] = leakedKey
	d := loadOf(vpsSource(k))
	assertNoLeak(t, d, leakedKeyBody)
	msgs := errorsAt(d, "nodes.controlPlanes[0].rescue.hostKey")
	require.Len(t, msgs, 1)
	assert.Contains(t, msgs[0], "holds a private key")
}

// writeStack writes a stack file into a project of its own and loads it as
// the Pulumi CLI would, with secrets set by path.
func writeStack(t *testing.T, text string, secrets map[string]string) stacks.Source {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Pulumi.check.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return stackstest.StackSource(t, path, secrets)
}

// vpsStackFile is a VPS stack file whose control plane has the rescue
// settings cpRescue (a YAML flow mapping) and whose workers are the list
// items workers.
func vpsStackFile(cpRescue, workers string) string {
	return `config:
  talos-cluster:platform: vps
  talos-cluster:cluster:
    name: prod
    talosVersion: v1.12.4
    network: {gateway: 203.0.113.254}
  talos-cluster:nodes:
    controlPlanes:
      - name: node-0
        ip: 203.0.113.10
        rescue: ` + cpRescue + `
    workers:
` + workers + `  talos-cluster:vps:
    allowedCidrs: [198.51.100.0/24]
`
}

// proxmoxStackWithKey is a Proxmox stack file with the token id tokenID and
// a private key in plain text, before the token secret is set.
func proxmoxStackWithKey(tokenID string) string {
	return `config:
  talos-cluster:platform: proxmox
  talos-cluster:cluster:
    name: lab
    talosVersion: v1.12.4
    network: {gateway: 10.10.0.1}
    vip: 10.10.0.5
  talos-cluster:nodes:
    controlPlanes: [{name: cp-0, ip: 10.10.0.10, vmId: 110}]
  talos-cluster:proxmox:
    endpoint: https://192.168.122.70:8006/
    apiTokenId: ` + tokenID + `
    ssh:
      hostKey: "` + pveHostKey + `"
      privateKey: |
        ` + strings.ReplaceAll(strings.TrimSpace(leakedKey), "\n", "\n        ") + `
`
}

// Pulumi marks a whole top-level key secret when one value in it is: the
// stack file tells every other credential under it that is in plain text.
func TestEveryCredentialLeafIsCheckedOnItsOwn(t *testing.T) {
	t.Parallel()
	vps := vpsStackFile(`{hostKey: "`+rescueHostKey+`"}`, `      - name: node-1
        ip: 203.0.113.11
        rescue: {hostKey: "`+rescueHostKey+`", password: S3cr3t-worker-in-plain-text}
`)
	src := writeStack(t, vps, map[string]string{"nodes.controlPlanes[0].rescue.password": "S3cr3t-secure-pw"})
	require.Contains(t, src.SecretKeys, "talos-cluster:nodes", "the engine marks the whole key")
	d := loadOf(src)
	assertNoLeak(t, d, "S3cr3t-worker-in-plain-text", "S3cr3t-secure-pw")
	var paths []string
	for _, p := range d.Errors {
		paths = append(paths, p.Path)
		assert.Contains(t, p.Message, "is stored in plain text")
	}
	assert.Equal(t, []string{"nodes.workers[0].rescue.password"}, paths)

	// Set by path as it should be, the second one is fine.
	src = writeStack(t, strings.Replace(vps, ", password: S3cr3t-worker-in-plain-text", "", 1), map[string]string{
		"nodes.controlPlanes[0].rescue.password": "S3cr3t-secure-pw", "nodes.workers[0].rescue.password": "S3cr3t-secure-pw-2",
	})
	require.NoError(t, loadOf(src).Err())

	src = writeStack(t, proxmoxStackWithKey("root@pam!pulumi="+tokenSecret), map[string]string{"proxmox.apiTokenSecret": tokenSecret})
	require.Contains(t, src.SecretKeys, "talos-cluster:proxmox")
	d = loadOf(src)
	assertNoLeak(t, d, tokenSecret, leakedKeyBody)
	got := map[string]string{}
	for _, p := range d.Errors {
		got[p.Path] += p.Message
	}
	assert.Contains(t, got["proxmox.ssh.privateKey"], "is stored in plain text")
	assert.Contains(t, got["proxmox.apiTokenId"], "it is stored in plain text in the stack file")
	assert.NotContains(t, got, "proxmox.apiTokenSecret")
	assert.Len(t, got, 2, "%v", d.Err())
}

// The program finds the stack file the engine ran it for: Pulumi.yaml's
// stackConfigDir honoured, a fully qualified stack name cut to its own.
func TestCaptureSourceReadsTheStackFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "Pulumi.yaml"), []byte("name: talos-cluster\nruntime: go\nstackConfigDir: stacks\n"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(root, "stacks"), 0o700))
	stack := `config:
  other:thing: x
  talos-cluster:platform: proxmox
  talos-cluster:proxmox:
    apiTokenSecret: {secure: v1:abc}
    ssh: {privateKey: plain-key, port: 22}
    noProxy: [a, b]
`
	require.NoError(t, os.WriteFile(filepath.Join(root, "stacks", "Pulumi.dev.yaml"), []byte(stack), 0o600))
	for _, name := range []string{"dev", "organization/talos-cluster/dev"} {
		var src stacks.Source
		stacks.CaptureSource(&src)(&pulumi.RunInfo{Project: "talos-cluster", Stack: name, RootDirectory: root})
		assert.Equal(t, map[string]string{
			"platform": "proxmox", "proxmox.ssh.privateKey": "plain-key", "proxmox.ssh.port": "22",
			"proxmox.noProxy[0]": "a", "proxmox.noProxy[1]": "b",
		}, src.PlainInFile, name)
	}
	var src stacks.Source
	stacks.CaptureSource(&src)(&pulumi.RunInfo{Project: "talos-cluster", Stack: "missing", RootDirectory: root})
	assert.Nil(t, src.PlainInFile, "no stack file: the top-level keys are all there is")
}

func TestPlainValuesFromStackFile(t *testing.T) {
	t.Parallel()
	plain, err := stacks.PlainValuesFromStackFile([]byte(`secretsprovider: passphrase
config:
  talos-cluster:nodes:
    controlPlanes:
      - &cp {name: a, rescue: {password: {secure: v1:xyz}, user: root}}
      - *cp
    workers: ~
  talos-cluster:proxmox: {secure: v1:whole-key}
`), "talos-cluster")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"nodes.controlPlanes[0].name": "a", "nodes.controlPlanes[0].rescue.user": "root",
		"nodes.controlPlanes[1].name": "a", "nodes.controlPlanes[1].rescue.user": "root",
	}, plain)

	plain, err = stacks.PlainValuesFromStackFile([]byte("encryptionsalt: x\n"), "talos-cluster")
	require.NoError(t, err)
	assert.Empty(t, plain)
	_, err = stacks.PlainValuesFromStackFile([]byte("config: [1]\n"), "talos-cluster")
	require.Error(t, err)
}

// After a value that cannot be decoded, nothing more is said about that key
// or the keys under it.
func TestTypeErrorsGetNoFollowUps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, wantMsg string
		src                 func() stacks.Source
	}{
		{"VM id as a word", "nodes.workers[0].vmId", `must be a whole number, got the string "abc"`, func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["vmId"] = "abc"
			return proxmoxSource(k)
		}},
		{"gateway as a number", "cluster.network.gateway", "must be a string, got the number 10 (quote it in YAML)", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster", "network")["gateway"] = 10
			return proxmoxSource(k)
		}},
		{"control planes as an object", "nodes.controlPlanes", "must be a list, got an object", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes")["controlPlanes"] = obj{"name": "cp-0"}
			return proxmoxSource(k)
		}},
		{"cluster as a string", "cluster", `must be an object, got the string "lab"`, func() stacks.Source {
			k := proxmoxKeys()
			k["cluster"] = "lab"
			return proxmoxSource(k)
		}},
		{"patch as a list", "nodes.workers[0].patches[0]", "must be an object or a YAML string, got a list of 1 items", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["patches"] = []any{[]any{obj{"op": "add"}}}
			return proxmoxSource(k)
		}},
		{"patch as a number", "cluster.patches.all[0]", "must be an object or a YAML string, got the number 7", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["patches"] = obj{"all": []any{7}}
			return proxmoxSource(k)
		}},
		{"empty patch", "cluster.patches.worker[0]", "patch is empty", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["patches"] = obj{"worker": []any{"  "}}
			return proxmoxSource(k)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := loadOf(tc.src())
			assert.Equal(t, []string{tc.wantMsg}, errorsAt(d, tc.path), "%v", d.Err())
			for _, p := range slices.Concat(d.Errors, d.Warnings) {
				assert.False(t, strings.HasPrefix(p.Path, tc.path+".") || strings.HasPrefix(p.Path, tc.path+"["),
					"no follow-up under %s: %s", tc.path, p)
			}
		})
	}
}

// secretAndSizeInvalidCases are this file's classes of the invalid-config
// table: every secret key with every wrong kind of value, in plain text,
// credentials where none belongs, a config too large to start the program
// with, and type errors (which get no follow-up, see
// TestTypeErrorsGetNoFollowUps).
func secretAndSizeInvalidCases() []invalidCase {
	var cases []invalidCase
	for _, l := range secretLocations() {
		for _, w := range wrongValues() {
			cases = append(cases, invalidCase{
				name: fmt.Sprintf("%s as a %s", l.path, w.name),
				src: func() stacks.Source {
					k := l.base()
					l.set(k, w.value)
					return l.source(k)
				},
				wantPath: l.path, wantMsg: w.wantMsg,
			})
		}
		cases = append(cases, invalidCase{
			name: l.path + " in plain text next to a secure value",
			src: func() stacks.Source {
				k := l.base()
				l.set(k, "S3cr3t-plain")
				src := l.source(k)
				src.PlainInFile = map[string]string{l.path: "S3cr3t-plain"}
				return src
			},
			wantPath: l.path, wantMsg: "is stored in plain text",
		})
	}
	return append(cases,
		invalidCase{"token secret in the token id", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["apiTokenId"] = "root@pam!pulumi=" + tokenSecret
			return proxmoxSource(k)
		}, "proxmox.apiTokenId", "holds the token secret after '='"},
		invalidCase{"private key as a host key", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox", "ssh")["hostKey"] = leakedKey
			return proxmoxSource(k)
		}, "proxmox.ssh.hostKey", "holds a private key"},
		invalidCase{"config too large for the environment: a patch", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["patches"] = obj{"all": []any{"machine:\n  sysctls: {}\n# " + strings.Repeat("x", 130*1024)}}
			return proxmoxSource(k)
		}, "cluster.patches.all[0]", `which Linux limits to 128 KiB, so preview, up and destroy would fail with "argument list too long"`},
		invalidCase{"config too large for the environment: a Helm value", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["cilium"] = obj{"values": obj{"extraConfig": obj{"blob": strings.Repeat("z", 130*1024)}}}
			return proxmoxSource(k)
		}, "cluster.cilium.values.extraConfig.blob", "of the stack config's 130."},
		invalidCase{"config too large for the environment: no part dominates", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["cilium"] = obj{"values": obj{"blob": strings.Repeat("z", 50*1024)}}
			at(k, "cluster")["certApprover"] = obj{"values": obj{"blob": strings.Repeat("z", 50*1024)}}
			at(k, "cluster")["patches"] = obj{"all": []any{"machine:\n  sysctls: {}\n# " + strings.Repeat("x", 30*1024)}}
			return proxmoxSource(k)
		}, "cluster", "make the config at least 2."},
		invalidCase{"config too large for the environment: the nodes", func() stacks.Source {
			k := proxmoxKeys()
			var workers []any
			for i := range 2500 {
				workers = append(workers, obj{"name": fmt.Sprintf("worker-%d", i), "ip": "10.10.0.20", "vmId": 1000 + i})
			}
			at(k, "nodes")["workers"] = workers
			return proxmoxSource(k)
		}, "nodes.workers", "make the config at least"},
		invalidCase{"secret as a number, then not also required", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["apiTokenSecret"] = 42
			return proxmoxSource(k)
		}, "proxmox.apiTokenSecret", "must be a string, got a number"},
	)
}

// A top-level key that takes a plain string, set with --secret, is a
// secret key too.
func TestPlainKeySetAsSecretIsNotEchoed(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	k["platform"] = "S3cr3t-platform"
	d := loadOf(k.source("proxmox", "platform"))
	assertNoLeak(t, d, "S3cr3t-platform")
	assert.Equal(t, []string{`"[secret]" is not a platform; use ` + "`proxmox`, `vps` or `local`"}, errorsAt(d, "platform"))
}

// captureStack runs CaptureSource as the program starts: the engine hands
// over the config of engineText with secrets set by path, and the program
// reads the stack file fileText, as the user wrote it, from the project.
func captureStack(t *testing.T, engineText, fileText string, secrets map[string]string) stacks.Source {
	t.Helper()
	engine := writeStack(t, engineText, secrets)
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "Pulumi.yaml"), []byte("name: talos-cluster\nruntime: go\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(root, "Pulumi.dev.yaml"), []byte(fileText), 0o600))
	var src stacks.Source
	stacks.CaptureSource(&src)(&pulumi.RunInfo{
		Project: "talos-cluster", Stack: "dev", RootDirectory: root,
		Config: engine.Values, ConfigSecretKeys: engine.SecretKeys,
	})
	return src
}

// Every credential stored in plain text beside a secure one under the same
// top-level key is named, however the stack file spells it: a YAML merge
// key (`<<: *anchor`) brings its keys into the mapping, as Pulumi reads it.
// When the stack file could not be read, each credential that could not be
// told apart from a secure sibling is named in a warning.
func TestPlainCredentialsBesideSecureOnesAreNamed(t *testing.T) {
	t.Parallel()
	const workerPW = "S3cr3t-worker-merged"
	vps := vpsStackFile(`{hostKey: "`+rescueHostKey+`"CP_PASSWORD}`, `      - &worker
        name: node-1
        ip: 203.0.113.11
        rescue: {hostKey: "`+rescueHostKey+`", password: `+workerPW+`}
      - <<: *worker
        name: node-2
        ip: 203.0.113.12
`)
	cpSecret := map[string]string{"nodes.controlPlanes[0].rescue.password": "S3cr3t-secure-pw"}
	engineText := strings.Replace(vps, "CP_PASSWORD", "", 1)
	fileText := strings.Replace(vps, "CP_PASSWORD", ", password: {secure: v1:c2VjdXJl}", 1)

	t.Run("merged in", func(t *testing.T) {
		t.Parallel()
		d := loadOf(captureStack(t, engineText, fileText, cpSecret))
		assertNoLeak(t, d, workerPW, "S3cr3t-secure-pw")
		var paths []string
		for _, p := range d.Errors {
			paths = append(paths, p.Path)
			assert.Contains(t, p.Message, "is stored in plain text")
		}
		assert.Equal(t, []string{"nodes.workers[0].rescue.password", "nodes.workers[1].rescue.password"}, paths)
	})

	t.Run("stack file not read", func(t *testing.T) {
		t.Parallel()
		src := writeStack(t, engineText, cpSecret)
		src.PlainInFile = nil // config from elsewhere: `--config-file`, an older CLI
		d := loadOf(src)
		assertNoLeak(t, d, workerPW, "S3cr3t-secure-pw")
		var paths []string
		for _, p := range d.Warnings {
			if strings.Contains(p.Message, "cannot be told apart") {
				paths = append(paths, p.Path)
			}
		}
		assert.Equal(t, []string{
			"nodes.controlPlanes[0].rescue.password", "nodes.workers[0].rescue.password", "nodes.workers[1].rescue.password",
		}, paths, "%v", d.Warnings)
	})

	t.Run("Proxmox, stack file not read", func(t *testing.T) {
		t.Parallel()
		src := writeStack(t, proxmoxStackWithKey("root@pam!pulumi"), map[string]string{"proxmox.apiTokenSecret": tokenSecret})
		src.PlainInFile = nil
		d := loadOf(src)
		require.NoError(t, d.Err())
		assertNoLeak(t, d, tokenSecret, leakedKeyBody)
		var paths []string
		for _, p := range d.Warnings {
			if strings.Contains(p.Message, "cannot be told apart") {
				paths = append(paths, p.Path)
				assert.Contains(t, p.Message, "talos-cluster:proxmox")
			}
		}
		assert.Equal(t, []string{"proxmox.apiTokenSecret", "proxmox.ssh.privateKey"}, paths, "%v", d.Warnings)
	})
}

// Merge keys read as YAML reads them: the mapping's own keys win, then the
// first merged mapping that sets a key.
func TestPlainValuesFollowMergeKeys(t *testing.T) {
	t.Parallel()
	plain, err := stacks.PlainValuesFromStackFile([]byte(`config:
  talos-cluster:nodes:
    a: &a {x: "1", y: "2", s: {secure: v1:abc}}
    b: &b {y: "3", z: "4"}
    c:
      <<: [*a, *b]
      x: "0"
    d: {<<: *b}
`), "talos-cluster")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"nodes.a.x": "1", "nodes.a.y": "2", "nodes.b.y": "3", "nodes.b.z": "4",
		"nodes.c.x": "0", "nodes.c.y": "2", "nodes.c.z": "4",
		"nodes.d.y": "3", "nodes.d.z": "4",
	}, plain)
}
