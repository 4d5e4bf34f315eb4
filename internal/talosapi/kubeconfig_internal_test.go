package talosapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// archive makes a tar.gz of files (name, content pairs); closeTar ends the
// tar archive, which Talos does not do.
func archive(t *testing.T, closeTar bool, files ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for i := 0; i+1 < len(files); i += 2 {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: files[i], Size: int64(len(files[i+1])), Mode: 0o600}))
		_, err := tw.Write([]byte(files[i+1]))
		require.NoError(t, err)
	}
	if closeTar {
		require.NoError(t, tw.Close())
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestUntarKubeconfig(t *testing.T) {
	t.Parallel()
	const kc = "apiVersion: v1\nkind: Config\n"
	talos := archive(t, false, "kubeconfig", kc)
	closed := archive(t, true, "kubeconfig", kc)

	for name, tc := range map[string]struct {
		in   []byte
		want string // the kubeconfig, or "error: " and what the error says
	}{
		"as Talos sends it":      {talos, kc},
		"a closed archive":       {closed, kc},
		"among other files":      {archive(t, true, "README", "hello", "./kubeconfig", kc, "z", "zz"), kc},
		"an empty kubeconfig":    {archive(t, false, "kubeconfig", ""), ""},
		"no kubeconfig":          {archive(t, true, "talosconfig", kc), "error: the answer holds no kubeconfig file"},
		"an empty answer":        {nil, "error: the answer is empty"},
		"not gzip":               {[]byte(kc), "error: the answer is not a tar.gz"},
		"truncated":              {talos[:len(talos)-12], "error: the answer is not a valid tar.gz"},
		"a wrong gzip checksum":  {flip(talos, len(talos)-6), "error: the answer is not a valid tar.gz: gzip: invalid checksum"},
		"gzip of something else": {gz(t, []byte(kc)), "error: the answer is not a valid tar.gz"},
		// The tar reader stops at the end of a closed archive, short of
		// the gzip trailer.
		"a closed archive, a wrong gzip checksum": {flip(closed, len(closed)-6), "error: the answer is not a valid tar.gz: gzip: invalid checksum"},
	} {
		got, err := untarKubeconfig(tc.in)
		if want, ok := bytes.CutPrefix([]byte(tc.want), []byte("error: ")); ok {
			require.Error(t, err, name)
			assert.Contains(t, err.Error(), string(want), name)
			continue
		}
		require.NoError(t, err, name)
		assert.Equal(t, tc.want, string(got), name)
	}

	// The largest kubeconfig taken, and a decompression bomb.
	largest := strings.Repeat("k", maxKubeconfig)
	got, err := untarKubeconfig(archive(t, true, "kubeconfig", largest))
	require.NoError(t, err)
	assert.Equal(t, largest, string(got))
	bomb := archive(t, true, "zeros", strings.Repeat("\x00", 2*maxArchive), "kubeconfig", kc)
	assert.Less(t, len(bomb), maxArchive/100, "it passes the bound of the packed answer")
	_, err = untarKubeconfig(bomb)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the answer unpacks to more than 2097152 bytes")

	// A kubeconfig beyond the bound is refused before it is read.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "kubeconfig", Size: maxKubeconfig + 1, Mode: 0o600}))
	require.NoError(t, zw.Close())
	_, err = untarKubeconfig(buf.Bytes())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the kubeconfig is larger than")
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0xff
	return b
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}
