package charttest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strconv"
)

// The chart repository is an OCI registry too (oci://<host>/<path>/<name>, as
// ghcr.io serves the Proxmox CSI plugin's chart), with Helm's media types (helm
// v3.20.2, pkg/registry/constants.go). It serves what client.go Pull asks: the
// manifest by tag (HEAD or GET, Docker-Content-Digest), then it and the blobs by
// digest; no tag listing (ValidateReference), anonymous pulls.
const (
	ociManifestType = "application/vnd.oci.image.manifest.v1+json"
	helmConfigType  = "application/vnd.cncf.helm.config.v1+json"
	helmChartType   = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

var (
	manifestPathRe = regexp.MustCompile(`^/v2/(.+)/manifests/([^/]+)$`)
	blobPathRe     = regexp.MustCompile(`^/v2/(.+)/blobs/(sha256:[0-9a-f]{64})$`)
)

// ociImage is one chart as an OCI artifact.
type ociImage struct {
	manifest []byte
	digest   string
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// addOCI makes the chart's manifest and blobs: the config is the chart's
// metadata as JSON (Helm's chart.Metadata fields), the layer its archive.
func (s *Server) addOCI(name, version string, meta map[string]any, archive []byte) error {
	fields := map[string]any{}
	for k, v := range meta {
		if metadataFields[k] {
			fields[k] = v
		}
	}
	config, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("unable to write the OCI config of %s: %w", name, err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ociManifestType,
		"config":        map[string]any{"mediaType": helmConfigType, "digest": digestOf(config), "size": len(config)},
		"layers":        []map[string]any{{"mediaType": helmChartType, "digest": digestOf(archive), "size": len(archive)}},
	})
	if err != nil {
		return fmt.Errorf("unable to write the OCI manifest of %s: %w", name, err)
	}
	s.blobs[digestOf(config)] = config
	s.blobs[digestOf(archive)] = archive
	img := ociImage{manifest: manifest, digest: digestOf(manifest)}
	s.images[name+":"+version] = img
	s.images[name+"@"+img.digest] = img
	return nil
}

// handleOCI answers the registry API's pulls; false when the path is not
// one of its.
func (s *Server) handleOCI(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path == "/v2/" || r.URL.Path == "/v2" {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		_, _ = w.Write([]byte("{}"))
		return true
	}
	if m := manifestPathRe.FindStringSubmatch(r.URL.Path); m != nil {
		sep := ":"
		if len(m[2]) > 7 && m[2][:7] == "sha256:" {
			sep = "@"
		}
		img, ok := s.images[path.Base(m[1])+sep+m[2]]
		if !ok {
			ociError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest unknown")
			return true
		}
		serveContent(w, r, ociManifestType, img.digest, img.manifest)
		return true
	}
	if m := blobPathRe.FindStringSubmatch(r.URL.Path); m != nil {
		blob, ok := s.blobs[m[2]]
		if !ok {
			ociError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob unknown to registry")
			return true
		}
		serveContent(w, r, "application/octet-stream", m[2], blob)
		return true
	}
	return false
}

func serveContent(w http.ResponseWriter, r *http.Request, mediaType, digest string, data []byte) {
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Docker-Content-Digest", digest)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(data)
}

// ociError is the distribution spec's error body.
func ociError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
}
