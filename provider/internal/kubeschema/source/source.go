// Package source reads the kubernetes schema kubeschema extracts from: the
// provider module, downloaded by the go command (the Go module proxy, or
// the module cache when it holds it).
package source

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema"
)

// Extracted is kubeschema.Extract of kubeschema.Module's schema, stamped
// with the version of kubeschema.SDKModule in the current module's go.mod.
func Extracted() ([]byte, error) {
	out, err := exec.Command("go", "mod", "download", "-json", kubeschema.Module).Output() //nolint:gosec // constant arguments
	if err != nil {
		return nil, fmt.Errorf("unable to download %s: %w", kubeschema.Module, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("unable to download %s: %w", kubeschema.Module, err)
	}
	if mod.Error != "" {
		return nil, fmt.Errorf("unable to download %s: %s", kubeschema.Module, mod.Error)
	}
	full, err := os.ReadFile(filepath.Join(mod.Dir, filepath.FromSlash(kubeschema.SchemaFile)))
	if err != nil {
		return nil, fmt.Errorf("unable to read the kubernetes schema: %w", err)
	}
	version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", kubeschema.SDKModule).Output() //nolint:gosec // constant arguments
	if err != nil {
		return nil, fmt.Errorf("unable to read the version of %s: %w", kubeschema.SDKModule, err)
	}
	return kubeschema.Extract(full, strings.TrimSpace(string(version)))
}
