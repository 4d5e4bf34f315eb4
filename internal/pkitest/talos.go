package pkitest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
)

// TalosBundle makes a Talos secrets bundle as `talosctl gen secrets` does.
func TalosBundle(t testing.TB) *secrets.Bundle {
	t.Helper()
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), config.TalosVersionCurrent)
	must(t, err)
	return b
}

// WriteTalosSecrets writes b as secrets.yaml (the YAML talosctl writes) into
// dir and returns its path.
func WriteTalosSecrets(t testing.TB, b *secrets.Bundle, dir string) string {
	t.Helper()
	raw, err := yaml.Marshal(b)
	must(t, err)
	p := filepath.Join(dir, "secrets.yaml")
	must(t, os.WriteFile(p, raw, 0o600))
	return p
}

// WriteTalosconfig writes the talosconfig `talosctl gen config` makes from b
// for a cluster name, with the endpoints an operator sets afterwards, into
// dir and returns its path.
func WriteTalosconfig(t testing.TB, b *secrets.Bundle, dir, cluster string, endpoints ...string) string {
	t.Helper()
	in, err := generate.NewInput(cluster, "https://"+cluster+":6443", "", generate.WithSecretsBundle(b), generate.WithEndpointList(endpoints))
	must(t, err)
	tc, err := in.Talosconfig()
	must(t, err)
	raw, err := tc.Bytes()
	must(t, err)
	p := filepath.Join(dir, "talosconfig")
	must(t, os.WriteFile(p, raw, 0o600))
	return p
}
