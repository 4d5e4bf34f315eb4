package chartfake

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v4"
)

// A chart directory is served as `helm package` packs it, with the version
// set, listed in the index with its digest; through the proxy, a client
// that asks for the public repository's name gets the fake, trusted
// through its CA.
func TestAChartIsServedUnderTheRepositorysName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "templates"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: demo\nversion: 0.0.1-dummy\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "templates", "cm.yaml"), []byte("kind: ConfigMap\n"), 0o600))
	repo := New(t, []string{"charts.example.org"}, Chart{Dir: dir, Version: "1.2.10"})
	proxy := Proxy(t, map[string]string{"charts.example.org:443": repo.Listener.Addr().String()})

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(repo.CA))
	proxyURL, err := url.Parse(proxy)
	require.NoError(t, err)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	get := func(path string) []byte {
		resp, err := hc.Get("https://charts.example.org/" + path)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return b
	}
	var index struct {
		Entries map[string][]struct {
			Version string   `yaml:"version"`
			URLs    []string `yaml:"urls"`
			Digest  string   `yaml:"digest"`
		} `yaml:"entries"`
	}
	require.NoError(t, yaml.Unmarshal(get("index.yaml"), &index))
	require.Len(t, index.Entries["demo"], 1)
	e := index.Entries["demo"][0]
	assert.Equal(t, "1.2.10", e.Version)
	assert.Len(t, e.Digest, 64)
	gz, err := gzip.NewReader(bytesReader(get(e.URLs[0])))
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[h.Name] = string(b)
	}
	assert.Contains(t, files["demo/Chart.yaml"], "version: 1.2.10")
	assert.Equal(t, "kind: ConfigMap\n", files["demo/templates/cm.yaml"])

	resp, err := hc.Get("https://elsewhere.example.org/")
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "no route elsewhere")
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
