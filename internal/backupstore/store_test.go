package backupstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/agekeys"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
)

// Put, List (with the metadata), Get and Delete against each target.
func TestStore(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			f := tg.open(t, backupstore.Options{})
			ctx := t.Context()
			id := x25519(t)
			to := []age.Recipient{id.Recipient()}

			list, err := f.store.List(ctx)
			require.NoError(t, err)
			require.Empty(t, list)

			older := payload(t, 200<<10, "OLDER")
			newer := payload(t, 1<<20+123, "NEWER")
			metaOld := map[string]string{"node": "cp-1", "talos-version": "v1.13.9", "taken-at": "2026-05-04T03:00:00Z"}
			metaNew := map[string]string{"node": "cp-2", "talos-version": "v1.13.9", "note": "naïve / spaces & = : @ %"}
			before := time.Now().Add(-2 * time.Second)
			o1, err := f.store.Put(ctx, "prod/2026-05-04T03:00:00Z.tar.age", bytes.NewReader(older), to, metaOld)
			require.NoError(t, err)
			o2, err := f.store.Put(ctx, "prod/2026-05-05T03:00:00Z.tar.age", bytes.NewReader(newer), to, metaNew)
			require.NoError(t, err)
			require.Greater(t, o1.Size, int64(len(older)), "the object is the ciphertext")
			require.Equal(t, metaOld, o1.Meta)
			require.WithinRange(t, o2.Created, before, time.Now().Add(2*time.Second))
			require.Equal(t, time.UTC, o2.Created.Location())

			list, err = f.store.List(ctx)
			require.NoError(t, err)
			require.Equal(t, []backupstore.Object{o2, o1}, list, "newest first, metadata round trip")

			got, err := readAllGet(t, f.store, o1.Name, []age.Identity{id})
			require.NoError(t, err)
			require.Equal(t, older, got)
			got, err = readAllGet(t, f.store, o2.Name, []age.Identity{x25519(t), id})
			require.NoError(t, err)
			require.Equal(t, newer, got)

			_, err = readAllGet(t, f.store, o2.Name, []age.Identity{x25519(t)})
			require.ErrorIs(t, err, backupstore.ErrWrongIdentity)
			require.ErrorContains(t, err, `unable to decrypt backup "prod/2026-05-05T03:00:00Z.tar.age": none of the given identities`)
			_, err = readAllGet(t, f.store, "prod/missing.tar.age", []age.Identity{id})
			require.ErrorIs(t, err, backupstore.ErrNotFound)

			require.NoError(t, f.store.Delete(ctx, o1.Name))
			require.NoError(t, f.store.Delete(ctx, o1.Name), "already gone is success")
			list, err = f.store.List(ctx)
			require.NoError(t, err)
			require.Equal(t, []backupstore.Object{o2}, list)

			// A Put of the same name replaces the object. (gofakes3 merges
			// the old metadata into the new, which S3 does not: so the
			// test gives the same keys.)
			o3, err := f.store.Put(ctx, o2.Name, bytes.NewReader(older), to, map[string]string{"node": "cp-3", "talos-version": "v1.14.0", "note": "replaced"})
			require.NoError(t, err)
			require.Equal(t, map[string]string{"node": "cp-3", "talos-version": "v1.14.0", "note": "replaced"}, o3.Meta)
			got, err = readAllGet(t, f.store, o2.Name, []age.Identity{id})
			require.NoError(t, err)
			require.Equal(t, older, got)
		})
	}
}

// Put refuses what it must not store: no recipients, names List would not
// see or that leave the prefix, metadata that is not small and simple.
func TestPutRefuses(t *testing.T) {
	t.Parallel()
	f := openFileTarget(t, backupstore.Options{})
	to := []age.Recipient{x25519(t).Recipient()}
	put := func(name string, to []age.Recipient, meta map[string]string) error {
		_, err := f.store.Put(t.Context(), name, strings.NewReader("x"), to, meta)
		return err
	}
	require.ErrorIs(t, put("prod/a.tar.age", nil, nil), agekeys.ErrNoRecipients)
	for _, name := range []string{"", "prod/a.tar", ".age", "prod/.age", "/prod/a.age", "prod//a.age", "../a.age", "prod/../../a.age", "a\nb.age", `a\b.age`, strings.Repeat("a", 600) + ".age"} {
		require.Error(t, put(name, to, nil), "name %q", name)
	}
	for _, meta := range []map[string]string{
		{"Node": "cp-1"},
		{"node_name": "cp-1"},
		{"": "x"},
		{"node": strings.Repeat("x", 257)},
		{"a": strings.Repeat("x", 256), "b": strings.Repeat("x", 256), "c": strings.Repeat("x", 256), "d": strings.Repeat("x", 256),
			"e": strings.Repeat("x", 256), "f": strings.Repeat("x", 256), "g": strings.Repeat("x", 256), "h": strings.Repeat("x", 256)},
	} {
		require.Error(t, put("prod/a.tar.age", to, meta), "meta %v", meta)
	}
	require.NoError(t, put("prod/a.tar.age", to, map[string]string{"node": strings.Repeat("x", 256)}))
	require.Error(t, f.store.Delete(t.Context(), "prod/a.tar"), "Delete only touches backups")

	list, err := f.store.List(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
}

// Open refuses targets it cannot use safely.
func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	for target, want := range map[string]string{
		"relative/dir":                        "scheme must be file:// or s3://",
		"file://relative/dir":                 "file:///absolute/path",
		"file:///tmp/x?metadata=skip":         "takes no parameters",
		"s3:///prefix":                        "s3://bucket/prefix",
		"s3://bucket/p?endpint=http://x":      `unknown parameter "endpint"`,
		"s3://bucket/p?endpoint=minio:9000":   "not an http:// or https:// URL",
		"s3://bucket/p?use_path_style=maybe":  "use_path_style",
		"s3://bucket/a/../b":                  "path segments",
		"s3://AKID:secret@bucket/p":           "credentials do not belong in the URL",
		"gs://bucket/p":                       "scheme must be",
		"s3://bucket/p?endpoint=http://[::1":  "not an http",
		"s3://bucket/p?endpoint=http://h:1%z": "unable to parse the parameters",
		"s3://AKID:secret%zz@bucket/p":        "unable to parse backup target",
	} {
		_, err := backupstore.Open(t.Context(), target, backupstore.Options{})
		require.ErrorContains(t, err, want, "target %q", target)
		require.NotContains(t, err.Error(), "secret", "target %q", target)
	}
	_, err := backupstore.Open(t.Context(), "file://"+t.TempDir(), backupstore.Options{PartSize: 1 << 20})
	require.ErrorContains(t, err, "below S3's minimum")
	_, err = backupstore.Open(t.Context(), "s3://bucket/p?endpoint=http://127.0.0.1:1", backupstore.Options{AccessKeyID: "x"})
	require.ErrorContains(t, err, "both the access key id and the secret access key")
}

// Neither target ever holds a byte of the plain backup: not the archive,
// not the Pulumi state in it, not in gocloud's .attrs sidecar files.
func TestTargetHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	const marker = "PLAIN-BACKUP-MARKER-7f3a9c"
	state := []byte(`{"version":3,"checkpoint":{"stack":"organization/talos/prod","latest":{"secrets_providers":{"type":"passphrase"},` +
		`"resources":[{"urn":"urn:pulumi:prod::talos::talos:index:Cluster::prod","outputs":{"talosconfig":"` + marker + `-STATE"}}]}}}`)
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			f := tg.open(t, backupstore.Options{})
			to := []age.Recipient{x25519(t).Recipient()}
			_, err := f.store.Put(t.Context(), "prod/2026-05-04T03:00:00Z.tar.age", bytes.NewReader(payload(t, 512<<10, marker)), to,
				map[string]string{"node": "cp-1"})
			require.NoError(t, err)
			_, err = f.store.Put(t.Context(), "prod/2026-05-04T03:00:00Z.state.json.age", bytes.NewReader(state), to,
				map[string]string{"kind": "pulumi-state"})
			require.NoError(t, err)

			raw := f.raw(t)
			require.NotEmpty(t, raw)
			all := ""
			for _, b := range raw {
				all += string(b)
			}
			require.Contains(t, all, "cp-1", "the walk reads the metadata too")
			require.Contains(t, all, "pulumi-state", "the walk reads the metadata too")
			sidecars := 0
			for path, b := range raw {
				if strings.HasSuffix(path, ".attrs") {
					sidecars++
					require.Contains(t, string(b), "user.metadata", "a sidecar holds the metadata")
				}
				require.NotContains(t, string(b), marker, "%s holds plain bytes", path)
				require.NotContains(t, string(b), "secrets_providers", "%s holds plain state", path)
				require.NotContains(t, string(b), "urn:pulumi", "%s holds plain state", path)
			}
			if f.dir != "" {
				require.Equal(t, 2, sidecars, "fileblob keeps metadata in .attrs files")
			} else {
				require.Len(t, raw, 2)
				for key := range raw {
					require.True(t, strings.HasPrefix(key, testPrefix+"/prod/"), "objects live under the prefix: %s", key)
				}
			}
		})
	}
}

// An upload that breaks half way (the source fails, the context is
// cancelled; on S3 also after some parts of a multipart upload) leaves
// neither an object nor a temporary file nor an open multipart upload.
func TestInterruptedPutLeavesNothing(t *testing.T) {
	t.Parallel()
	errSource := errors.New("etcd snapshot stream broke")
	for _, tg := range targets {
		for _, tc := range []struct {
			name     string
			size     int
			cancel   bool
			partSize int
		}{
			{name: "source error", size: 700 << 10},
			{name: "context cancelled", size: 700 << 10, cancel: true},
			// Beyond the transfer manager's 16 MiB threshold: a multipart
			// upload whose first parts are sent, then aborted.
			{name: "source error after parts", size: 18 << 20, partSize: 5 << 20},
			{name: "context cancelled after parts", size: 18 << 20, partSize: 5 << 20, cancel: true},
		} {
			if tc.partSize != 0 && tg.name == "file" {
				continue // parts are S3's: on a file target it is the small case again
			}
			t.Run(tg.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				f := tg.open(t, backupstore.Options{PartSize: tc.partSize})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var src io.Reader = &failingReader{r: io.LimitReader(zeros{}, int64(tc.size)), err: errSource}
				if tc.cancel {
					src = &cancellingReader{r: io.LimitReader(zeros{}, 4*int64(tc.size)), after: tc.size, cancel: cancel}
				}
				_, err := f.store.Put(ctx, "prod/2026-05-04T03:00:00Z.tar.age", src, []age.Recipient{x25519(t).Recipient()}, map[string]string{"node": "cp-1"})
				require.Error(t, err)
				if tc.cancel {
					require.ErrorIs(t, err, context.Canceled)
				} else {
					require.ErrorIs(t, err, errSource)
					require.ErrorContains(t, err, "unable to read the backup's source")
				}

				list, err := f.store.List(t.Context())
				require.NoError(t, err)
				require.Empty(t, list)
				require.Empty(t, f.leftovers(t), "an aborted write leaves nothing behind")
				if f.multiparts != nil && tc.partSize != 0 {
					require.Positive(t, f.multiparts(), "the upload was a multipart one")
				}
			})
		}
	}
}

// A temporary file stranded by a killed writer (fileblob writes
// <name>.<hex time>.tmp next to the object and renames it on success) is
// never taken for a backup.
func TestListIgnoresStrandedTempFiles(t *testing.T) {
	t.Parallel()
	f := openFileTarget(t, backupstore.Options{})
	to := []age.Recipient{x25519(t).Recipient()}
	o, err := f.store.Put(t.Context(), "prod/2026-05-04T03:00:00Z.tar.age", strings.NewReader("etcd"), to, nil)
	require.NoError(t, err)
	stranded := filepath.Join(f.dir, "prod", "2026-05-05T03:00:00Z.tar.age.18a3f2c4b5d6e7f8.tmp")
	require.NoError(t, os.WriteFile(stranded, []byte("half an upload"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "README"), []byte("not a backup"), 0o600))

	list, err := f.store.List(t.Context())
	require.NoError(t, err)
	require.Equal(t, []backupstore.Object{o}, list)
}

// The encryption's size overhead on a 64 MiB backup: age's header plus a
// 16-byte tag per 64 KiB chunk, well under 0.1%.
func TestEncryptionOverhead(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	f := openFileTarget(t, backupstore.Options{})
	o, err := f.store.Put(t.Context(), "bench/overhead.tar.age", io.LimitReader(zeros{}, size), []age.Recipient{x25519(t).Recipient()}, nil)
	require.NoError(t, err)
	overhead := o.Size - size
	chunks := int64(size / (64 << 10))
	ratio := float64(overhead) / size
	t.Logf("64 MiB payload: %d bytes stored, overhead %d bytes (%d chunk tags x 16 = %d, header and nonce %d) = %.4f%%",
		o.Size, overhead, chunks, chunks*16, overhead-chunks*16, 100*ratio)
	require.GreaterOrEqual(t, overhead, chunks*16)
	require.Less(t, ratio, 0.001)
}

// What fileblob does on the disk during a write and after its abort: the
// ciphertext goes to <name>.<hex time>.tmp next to the object (not to
// $TMPDIR, so the final rename never crosses file systems) and the abort
// removes it; only the directory made for the name's path stays, empty.
func TestFileAbortedWriteOnDisk(t *testing.T) {
	t.Parallel()
	f := openFileTarget(t, backupstore.Options{})
	errSource := errors.New("source broke")
	var during []string
	src := &inspectingReader{r: io.LimitReader(zeros{}, 1<<20), at: 512 << 10, inspect: func() {
		during = f.leftovers(t)
	}}
	_, err := f.store.Put(t.Context(), "prod/2026-05-04T03:00:00Z.tar.age", &failingReader{r: src, err: errSource}, []age.Recipient{x25519(t).Recipient()}, nil)
	require.ErrorIs(t, err, errSource)
	require.Len(t, during, 1)
	require.Regexp(t, `/prod/2026-05-04T03:00:00Z\.tar\.age\.[0-9a-f]+\.tmp$`, during[0])

	require.Empty(t, f.leftovers(t))
	entries, err := os.ReadDir(f.dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.True(t, entries[0].IsDir())
	require.Equal(t, "prod", entries[0].Name())
	inside, err := os.ReadDir(filepath.Join(f.dir, "prod"))
	require.NoError(t, err)
	require.Empty(t, inside)
}

// inspectingReader calls inspect once, when at bytes have been read.
type inspectingReader struct {
	r       io.Reader
	at      int
	read    int
	inspect func()
}

// Read implements io.Reader.
func (i *inspectingReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	before := i.read
	i.read += n
	if before < i.at && i.read >= i.at {
		i.inspect()
	}
	return n, err
}
