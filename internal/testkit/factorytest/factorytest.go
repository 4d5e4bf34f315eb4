// Package factorytest is an httptest Talos Image Factory for tests: the
// schematic registration the Talos provider's schematic resource makes
// (POST /schematics) and the image downloads a Proxmox node makes from the
// URLs the provider's getUrls function builds (/image/<schematic>/<version>/<file>).
//
// Written from siderolabs/image-factory v0.9.0 (the version
// terraform-provider-talos v0.10.1, inside pulumi-talos v0.7.1, builds its
// client from): pkg/schematic parses a schematic strictly (unknown fields
// refused) and its id is the sha256 of its canonical YAML; the fake mirrors
// the schematic's fields rather than importing the package, which would
// bring the whole Talos module (pkg/imager/profile) into go.mod.
package factorytest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"

	"go.yaml.in/yaml/v4"
)

// schematic is image-factory's pkg/schematic.Schematic, field for field
// and in its order (the order decides the canonical YAML, hence the id).
type schematic struct {
	Overlay       overlay       `yaml:"overlay,omitempty"`
	Customization customization `yaml:"customization"`
}

type customization struct {
	ExtraKernelArgs  []string                `yaml:"extraKernelArgs,omitempty"`
	Meta             []metaValue             `yaml:"meta,omitempty"`
	SystemExtensions systemExtensions        `yaml:"systemExtensions,omitempty"`
	Bootloader       string                  `yaml:"bootloader,omitempty"`
	SecureBoot       secureBootCustomization `yaml:"secureboot,omitempty"`
}

type metaValue struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

type systemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

type overlay struct {
	Image   string         `yaml:"image"`
	Name    string         `yaml:"name"`
	Options map[string]any `yaml:"options,omitempty"`
}

type secureBootCustomization struct {
	IncludeWellKnownCertificates bool `yaml:"includeWellKnownCertificates,omitempty"`
}

// SchematicID is the id the Image Factory gives a schematic (YAML): the
// sha256 of its canonical form.
func SchematicID(doc []byte) (string, error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	var s schematic
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("unable to parse schematic: %w", err)
	}
	canonical, err := yaml.Marshal(&s)
	if err != nil {
		return "", fmt.Errorf("unable to marshal schematic: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:]), nil
}

// ImageSize is the size the fake reports for every image file.
const ImageSize = 100 << 20

// Server is the fake factory.
type Server struct {
	*httptest.Server
	mu         sync.Mutex
	schematics map[string][]byte // id -> the schematic as registered
}

var imageRe = regexp.MustCompile(`^/image/([0-9a-f]{64})/(v[0-9][^/]*)/([^/]+)$`)

// New starts the fake on loopback with TLS (its certificate is the
// httptest one: clients trust it through Certificate()).
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{schematics: map[string][]byte{}}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// Schematics lists the ids registered so far, sorted.
func (s *Server) Schematics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id := range s.schematics {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/schematics" && r.Method == http.MethodPost:
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, err := SchematicID(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.schematics[id] = body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"id": id})
	case imageRe.MatchString(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		id := imageRe.FindStringSubmatch(r.URL.Path)[1]
		s.mu.Lock()
		_, known := s.schematics[id]
		s.mu.Unlock()
		if !known {
			http.Error(w, "schematic not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(ImageSize))
		w.WriteHeader(http.StatusOK)
	default:
		http.NotFound(w, r)
	}
}
