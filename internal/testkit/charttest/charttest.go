// Package charttest is an httptest Helm chart repository for tests: the
// index.yaml and chart archives a Helm client (the one inside the
// pulumi-kubernetes plugin's Release) fetches for RepositoryOpts.Repo.
//
// It serves real charts from directories (the Cilium chart from the
// github.com/cilium/cilium module, for example), packaged as `helm
// package` packages them: a gzipped tar whose entries sit under the chart's
// name, with the version Chart.yaml gives or the one the test sets (a chart
// repository's release workflow sets it from the tag). The index follows
// Helm's repo.IndexFile (apiVersion v1, entries by name, each version with
// its URL and sha256 digest). It is an OCI registry of the same charts too
// (see oci.go).
package charttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
	"go.yaml.in/yaml/v4"
)

// Chart is a chart directory to serve.
type Chart struct {
	// Dir holds Chart.yaml, values.yaml and templates/.
	Dir string
	// Version replaces Chart.yaml's version when set.
	Version string
}

// Server is the fake repository.
type Server struct {
	*httptest.Server
	// CA is the PEM certificate of the CA that issued the server's: a
	// client trusts it through SSL_CERT_FILE.
	CA       []byte
	archives map[string][]byte // file name -> .tgz
	index    []byte
	images   map[string]ociImage // "name:version" and "name@digest"
	blobs    map[string][]byte   // by digest
}

var versionRe = regexp.MustCompile(`(?m)^version:.*$`)

// metadataFields are the fields of Helm's chart.Metadata (helm v3.20,
// pkg/chart/metadata.go): what `helm repo index` copies from Chart.yaml
// into an index entry. Helm reads an index strictly: another field of a
// Chart.yaml (Cilium's displayName) refuses the whole repository.
var metadataFields = map[string]bool{
	"name": true, "home": true, "sources": true, "version": true, "description": true, "keywords": true,
	"maintainers": true, "icon": true, "apiVersion": true, "condition": true, "tags": true, "appVersion": true,
	"deprecated": true, "annotations": true, "kubeVersion": true, "dependencies": true, "type": true,
}

// New packages the charts and serves them over TLS on loopback, with a
// certificate for 127.0.0.1 and the hosts given (a public repository's
// name, reached through Proxy), issued by CA.
func New(t testing.TB, hosts []string, charts ...Chart) *Server {
	t.Helper()
	s := &Server{archives: map[string][]byte{}, images: map[string]ociImage{}, blobs: map[string][]byte{}}
	ca, err := sx509.NewSelfSignedCertificateAuthority(sx509.ECDSA(true))
	if err != nil {
		t.Fatalf("charttest: CA: %v", err)
	}
	kp, err := sx509.NewKeyPair(ca, sx509.DNSNames(hosts), sx509.IPAddresses([]net.IP{net.ParseIP("127.0.0.1")}),
		sx509.NotAfter(time.Now().Add(24*time.Hour)), sx509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}))
	if err != nil {
		t.Fatalf("charttest: certificate: %v", err)
	}
	s.CA = ca.CrtPEM
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.handle))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{*kp.Certificate}, MinVersion: tls.VersionTLS12}
	s.StartTLS()
	t.Cleanup(s.Close)
	entries := map[string][]map[string]any{}
	for _, c := range charts {
		meta, archive, err := pack(c)
		if err != nil {
			t.Fatalf("charttest: %v", err)
		}
		name, _ := meta["name"].(string)
		version, _ := meta["version"].(string)
		file := fmt.Sprintf("%s-%s.tgz", name, version)
		s.archives[file] = archive
		if err := s.addOCI(name, version, meta, archive); err != nil {
			t.Fatalf("charttest: %v", err)
		}
		sum := sha256.Sum256(archive)
		entry := map[string]any{"urls": []string{file}, "digest": hex.EncodeToString(sum[:]), "created": time.Now().UTC().Format(time.RFC3339)}
		for k, v := range meta {
			if metadataFields[k] {
				entry[k] = v
			}
		}
		entries[name] = append(entries[name], entry)
	}
	index, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "entries": entries, "generated": time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatalf("charttest: unable to write the index: %v", err)
	}
	s.index = index
	return s
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if s.handleOCI(w, r) {
		return
	}
	// A repository may sit under a path (https://<owner>.github.io/<repo>):
	// the index and the archives are found by their names.
	name := path.Base(r.URL.Path)
	switch archive, ok := s.archives[name]; {
	case name == "index.yaml":
		w.Header().Set("Content-Type", "application/x-yaml")
		_, _ = w.Write(s.index)
	case ok:
		w.Header().Set("Content-Type", "application/x-tar")
		_, _ = w.Write(archive)
	default:
		http.NotFound(w, r)
	}
}

// pack is `helm package`: the chart's files under <name>/ in a gzipped
// tar, Chart.yaml with the version set.
func pack(c Chart) (map[string]any, []byte, error) {
	chartYAML, err := os.ReadFile(filepath.Join(c.Dir, "Chart.yaml")) //nolint:gosec // the chart directory the test names
	if err != nil {
		return nil, nil, fmt.Errorf("unable to read chart: %w", err)
	}
	if c.Version != "" {
		chartYAML = versionRe.ReplaceAll(chartYAML, []byte("version: "+c.Version))
	}
	var meta map[string]any
	if err := yaml.Unmarshal(chartYAML, &meta); err != nil {
		return nil, nil, fmt.Errorf("unable to parse %s/Chart.yaml: %w", c.Dir, err)
	}
	name, _ := meta["name"].(string)
	if name == "" {
		return nil, nil, fmt.Errorf("unable to pack %s: Chart.yaml has no name", c.Dir)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err = filepath.WalkDir(c.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(c.Dir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path) //nolint:gosec // a file of the chart directory the test names
		if err != nil {
			return err
		}
		if rel == "Chart.yaml" {
			data = chartYAML
		}
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("unable to pack %s: %w", c.Dir, err)
	}
	return meta, buf.Bytes(), nil
}

// Proxy is an HTTPS proxy (HTTP CONNECT) that sends each host:port of
// routes to its local address and refuses the rest: with HTTPS_PROXY
// pointing at it, a client that asks for https://helm.cilium.io reaches
// a fake on loopback (Go's clients never proxy loopback addresses, so
// everything else local is reached directly).
func Proxy(t testing.TB, routes map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to, ok := routes[r.Host]
		if r.Method != http.MethodConnect || !ok {
			http.Error(w, "no route to "+r.Host, http.StatusBadGateway)
			return
		}
		upstream, err := net.Dial("tcp", to)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		hj, ok := w.(http.Hijacker)
		if !ok {
			_ = upstream.Close()
			http.Error(w, "no hijacking", http.StatusInternalServerError)
			return
		}
		conn, buf, err := hj.Hijack()
		if err != nil {
			_ = upstream.Close()
			return
		}
		if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
			_ = upstream.Close()
			_ = conn.Close()
			return
		}
		go func() {
			defer func() { _ = upstream.Close() }()
			defer func() { _ = conn.Close() }()
			go func() { _, _ = io.Copy(upstream, buf) }()
			_, _ = io.Copy(conn, upstream)
		}()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
