package charttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
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
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
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

// The repository is an OCI registry of the same charts, pulled with
// oras-go v2.6.0 as Helm v3.20.2's registry client pulls a chart
// (pkg/registry/client.go Pull: oras.Copy of the reference by tag into a
// memory store, then the config and the chart layer by media type): the
// layer is the chart's archive, the config its metadata.
func TestAChartIsPulledFromTheOCIRegistry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: demo\nversion: 0.0.1-dummy\n"), 0o600))
	repo := New(t, []string{"ghcr.io"}, Chart{Dir: dir, Version: "0.3.5"})
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(repo.CA))

	ctx := context.Background()
	r, err := remote.NewRepository(repo.Listener.Addr().String() + "/owner/charts/demo")
	require.NoError(t, err)
	r.Client = &auth.Client{Client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}
	store := memory.New()
	manifest, err := oras.Copy(ctx, r, "0.3.5", store, "", oras.DefaultCopyOptions)
	require.NoError(t, err, "pulled by tag")
	assert.Equal(t, "application/vnd.oci.image.manifest.v1+json", manifest.MediaType)
	successors, err := content.Successors(ctx, store, manifest)
	require.NoError(t, err)
	layers := map[string][]byte{}
	for _, d := range successors {
		data, err := content.FetchAll(ctx, store, d)
		require.NoError(t, err)
		layers[d.MediaType] = data
	}
	assert.JSONEq(t, `{"apiVersion":"v2","name":"demo","version":"0.3.5"}`, string(layers["application/vnd.cncf.helm.config.v1+json"]))
	assert.Equal(t, repo.archives["demo-0.3.5.tgz"], layers["application/vnd.cncf.helm.chart.content.v1.tar+gzip"], "the chart's archive")

	_, err = oras.Copy(ctx, r, "0.3.6", memory.New(), "", oras.DefaultCopyOptions)
	require.Error(t, err, "no such version")
}
