package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver/drivertest"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

func TestSourceFromConfigJSON(t *testing.T) {
	t.Parallel()
	want := stackstest.Example(t, stackstest.ProxmoxExample)
	got, err := stacks.SourceFromConfigJSON(stackstest.ConfigJSON(t, want))
	require.NoError(t, err)
	assert.Equal(t, "talos-cluster", got.Project)
	assert.Equal(t, want.Values, got.Values)
	assert.ElementsMatch(t, want.SecretKeys, got.SecretKeys)

	_, err = stacks.SourceFromConfigJSON([]byte(`{"aws:region":{"value":"eu-west-1"}}`))
	require.ErrorContains(t, err, "no platform key")
	_, err = stacks.SourceFromConfigJSON([]byte(`[secret]`))
	require.ErrorContains(t, err, "not the JSON")
}

type okAPI struct{}

func (okAPI) Version(context.Context) (string, error) { return "9.1.1", nil }
func (okAPI) Nodes(context.Context) ([]pveapi.Node, error) {
	return []pveapi.Node{{Node: "pve", Status: "online"}}, nil
}

func (okAPI) Storages(context.Context, string) ([]pveapi.Storage, error) {
	return []pveapi.Storage{{Storage: "local", Content: "iso"}, {Storage: "local-lvm", Content: "images"}}, nil
}
func (okAPI) VMs(context.Context) ([]pveapi.ClusterVM, error) { return nil, nil }

// Permissions grants every privilege the doctor asks for.
func (okAPI) Permissions(context.Context, string) (map[string]bool, error) {
	all := map[string]bool{"VM.Monitor": true}
	for _, p := range pveapitest.AllPrivileges {
		all[p] = true
	}
	return all, nil
}

func (okAPI) StorageContent(context.Context, string, string, string) ([]pveapi.Volume, error) {
	return nil, nil
}

func (okAPI) VMConfig(context.Context, string, int) (map[string]any, error) {
	return nil, pveapi.ErrNotFound
}

func (okAPI) QueryURLMetadata(context.Context, string, string) (pveapi.URLMetadata, error) {
	return pveapi.URLMetadata{}, nil
}

func TestDoctorCommandExitCodes(t *testing.T) {
	t.Parallel()
	raw := proxmoxStack(t, func(px map[string]any) { px["access"] = stacks.AccessDirect })
	routed := true
	e := doctor.Env{
		NewAPI: func(*stacks.Config) (doctor.API, error) { return okAPI{}, nil },
		SSH:    func(context.Context, *stacks.Config, string) (string, error) { return "ready", nil },
		// The host presents the key the stack pins.
		ScanHostKey: func(_ context.Context, cfg *stacks.Config) (ssh.PublicKey, error) {
			pin, err := stacks.ParseHostKey(cfg.Proxmox.SSH.HostKey)
			return pin.Key, err
		},
		Dial: func(context.Context, string, string) (net.Conn, error) {
			if !routed {
				return nil, &net.OpError{Op: "dial", Err: assert.AnError}
			}
			a, b := net.Pipe()
			_ = b.Close()
			return a, nil
		},
		Timeout: time.Second,
	}
	var out, errOut bytes.Buffer
	code := doctorCmd(context.Background(), []string{"--stack", "proxmox-homelab", "--config-json", "-"}, "", bytes.NewReader(raw), &out, &errOut, e)
	assert.Equal(t, exitcode.OK, code, out.String()+errOut.String())
	assert.Contains(t, out.String(), "Everything `pulumi up` needs is in place.")

	routed = false
	out.Reset()
	code = doctorCmd(context.Background(), []string{"--stack", "proxmox-homelab", "--config-json", "-"}, "", bytes.NewReader(raw), &out, &errOut, e)
	assert.Equal(t, exitcode.Failed, code)
	assert.Contains(t, out.String(), "FAIL  route")

	errOut.Reset()
	code = doctorCmd(context.Background(), []string{"--config-json", "-"}, "", strings.NewReader(""), &out, &errOut, e)
	assert.Equal(t, exitcode.Usage, code)
	assert.Contains(t, errOut.String(), "--stack")

	code = doctorCmd(context.Background(), []string{"--stack", "x", "--config-json", "-"}, "", strings.NewReader("nope"), &out, &errOut, e)
	assert.Equal(t, exitcode.BadConfig, code)
}

// The operation subcommands parse their flags into the driver's options.
func TestDriverSubcommandFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), "Pulumi.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), data, 0o600))
	fake := &drivertest.Pulumi{Stacks: []string{"vps-prod"}, Config: stackstest.ConfigJSON(t, stackstest.Example(t, stackstest.VPSExample)),
		Changes: map[string]int{"same": 4}}
	env := map[string]string{"STACK": "vps-prod", "PULUMI_BACKEND_URL": "file:///state", "PULUMI_CONFIG_PASSPHRASE": "x"}
	var stdout, stderr bytes.Buffer
	code := driverCmd(context.Background(), "destroy", []string{"--dir", dir, "--summary", filepath.Join(dir, "s.json")},
		&stdout, &stderr, func(k string) string { return env[k] }, fake)
	require.Equal(t, 0, code, stderr.String())
	call, ok := fake.Find("destroy")
	require.True(t, ok)
	assert.Contains(t, call.Args, "--run-program=true")
	assert.Contains(t, call.Env, "PULUMI_BACKEND_URL=file:///state", "the backend comes from the environment")
	assert.FileExists(t, filepath.Join(dir, "s.json"))

	assert.Equal(t, exitcode.Usage, driverCmd(context.Background(), "up", []string{"extra"}, &stdout, &stderr, func(string) string { return "" }, fake))
	assert.Equal(t, exitcode.Usage, driverCmd(context.Background(), "up", []string{"--bogus"}, &stdout, &stderr, func(string) string { return "" }, fake))
	assert.Equal(t, exitcode.Usage, Main(context.Background(), []string{"deploy"}, nil, &stdout, &stderr))
}
