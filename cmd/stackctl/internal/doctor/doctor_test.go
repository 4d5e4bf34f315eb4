package doctor_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// fakeAPI is the example host: node pve online, local (iso) and local-lvm
// (images), and some other VMs.
type fakeAPI struct {
	err      error
	version  string
	nodes    []pveapi.Node
	storages []pveapi.Storage
	vms      []pveapi.ClusterVM
	// lacks are privileges the token does not hold, by ACL path.
	lacks map[string][]string
	// permErr fails /access/permissions; fetchErr the node's URL fetch.
	permErr, fetchErr error
	fetched           []string
	// volumes are every datastore's images; configs the VMs' configs.
	volumes []pveapi.Volume
	configs map[int]map[string]any
}

func (f *fakeAPI) StorageContent(_ context.Context, _, storage, _ string) ([]pveapi.Volume, error) {
	var out []pveapi.Volume
	for _, v := range f.volumes {
		if strings.HasPrefix(v.VolID, storage+":") {
			out = append(out, v)
		}
	}
	return out, nil
}

func (f *fakeAPI) VMConfig(_ context.Context, _ string, vmid int) (map[string]any, error) {
	c, ok := f.configs[vmid]
	if !ok {
		return nil, pveapi.ErrNotFound
	}
	return c, nil
}

func healthyAPI() *fakeAPI {
	return &fakeAPI{
		nodes: []pveapi.Node{{Node: "pve", Status: "online"}},
		storages: []pveapi.Storage{
			{Storage: "local", Content: "iso,vztmpl,backup"},
			{Storage: "local-lvm", Content: "images,rootdir"},
		},
		vms: []pveapi.ClusterVM{{VMID: 100, Name: "opnsense", Node: "pve"}},
	}
}

func (f *fakeAPI) Version(context.Context) (string, error) {
	if f.version == "" {
		return "9.1.1", f.err
	}
	return f.version, f.err
}
func (f *fakeAPI) Nodes(context.Context) ([]pveapi.Node, error) {
	return f.nodes, nil
}

func (f *fakeAPI) Storages(context.Context, string) ([]pveapi.Storage, error) {
	return f.storages, nil
}
func (f *fakeAPI) VMs(context.Context) ([]pveapi.ClusterVM, error) { return f.vms, nil }

func (f *fakeAPI) Permissions(_ context.Context, path string) (map[string]bool, error) {
	if f.permErr != nil {
		return nil, f.permErr
	}
	have := map[string]bool{}
	for _, p := range append(pveapitest.AllPrivileges, "VM.Monitor") {
		have[p] = !slices.Contains(f.lacks[path], p)
	}
	return have, nil
}

func (f *fakeAPI) QueryURLMetadata(_ context.Context, node, rawURL string) (pveapi.URLMetadata, error) {
	f.fetched = append(f.fetched, node+" "+rawURL)
	return pveapi.URLMetadata{}, f.fetchErr
}

// The host key pinned in the example stack, and its fingerprint as
// `ssh-keygen -lf` prints it.
const (
	exampleHostKey   = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINa7eG/pBlvgisjquRHxcNSZhmgYkxhl3ScZ5sP47kKX"
	exampleHostKeyFP = "SHA256:/KkoOOaIPtx7VRPUwK66ZO/zzKwBfCEpqj44OVaPw4c"
)

// A key the host presents after a reinstall, or an impostor's.
const (
	strangerLine = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJzbzgU1kskLi7H36Wq4kAjh/rmPo053Qwt7aZy3WMdA"
	strangerFP   = "SHA256:DFP+ClXfOO+qces4CkuGU0VOmwGRFetv18DJKTH0Ar4"
)

var strangerKey = mustKey(strangerLine)

func mustKey(line string) ssh.PublicKey {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		panic(err)
	}
	return k
}

// env answers like a working set-up; tests break one thing at a time.
func env(api *fakeAPI) doctor.Env {
	return doctor.Env{
		ScanHostKey: func(context.Context, *stacks.Config) (ssh.PublicKey, error) {
			return mustKey(exampleHostKey), nil
		},
		NewAPI: func(*stacks.Config) (doctor.API, error) { return api, nil },
		SSH: func(context.Context, *stacks.Config, string) (string, error) {
			return "ready\n", nil
		},
		Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
			c1, c2 := net.Pipe()
			_ = c2.Close()
			return c1, nil
		},
		DialSSH: func(context.Context, *stacks.Config) (*ssh.Client, error) {
			return nil, errors.New("the direct stack must not open the SSH proxy")
		},
		Getenv:  func(string) string { return "" },
		Timeout: 2 * time.Second,
	}
}

// direct is the example stack with a route to the VM network, whose
// prefix length is left to the ProxmoxCluster's default (24).
func direct(t *testing.T) stacks.Source {
	t.Helper()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(px map[string]any) {
		px["access"] = stacks.AccessDirect
	})
	return stackstest.EditSection(t, src, "cluster", func(c map[string]any) {
		delete(c["network"].(map[string]any), "prefixLength")
	})
}

func run(t *testing.T, e doctor.Env) ([]doctor.Result, string) {
	t.Helper()
	rs := doctor.Run(context.Background(), e, direct(t), "proxmox-homelab")
	var b strings.Builder
	doctor.Print(&b, rs)
	return rs, b.String()
}

func TestDoctorAllGood(t *testing.T) {
	t.Parallel()
	rs, out := run(t, env(healthyAPI()))
	assert.False(t, doctor.Failed(rs), out)
	for _, want := range []string{"valid proxmox stack with 3 nodes", "Proxmox VE 9.1.1", `datastore "local" on pve holds iso`,
		`datastore "local-lvm" on pve holds images`, "every VM id is free",
		"ok    hostkey   192.168.122.70:22 presents the ssh-ed25519 key " + exampleHostKeyFP + ", the one proxmox.ssh.hostKey pins",
		"root@192.168.122.70:22 works", "10.10.0.0/24 is reachable",
		"token root@pam!pulumi holds every privilege the stack's runs take (Proxmox VE 9)",
		"Proxmox node pve reaches the Image Factory (factory.talos.dev)"} {
		assert.Contains(t, out, want)
	}
}

func TestDoctorSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		breakIt func(*fakeAPI, *doctor.Env)
		want    string
	}{
		"bad token": {func(a *fakeAPI, _ *doctor.Env) {
			a.err = &pveapi.APIError{Status: 401, Message: "authentication failure"}
		}, "rejects token root@pam!pulumi"},
		"unreachable API": {func(a *fakeAPI, _ *doctor.Env) { a.err = errors.New("dial tcp 192.168.122.70:8006: i/o timeout") },
			"is not reachable from this machine"},
		"unknown node": {func(a *fakeAPI, _ *doctor.Env) { a.nodes = []pveapi.Node{{Node: "pve1", Status: "online"}} },
			`Proxmox node "pve" does not exist (known: pve1)`},
		"offline node": {func(a *fakeAPI, _ *doctor.Env) { a.nodes[0].Status = "offline" }, `"pve" is offline`},
		"no iso content": {func(a *fakeAPI, _ *doctor.Env) { a.storages[0].Content = "backup" },
			`proxmox.isoDatastore: datastore "local" on pve does not allow content "iso"`},
		"missing datastore": {func(a *fakeAPI, _ *doctor.Env) { a.storages = a.storages[:1] },
			`proxmox.diskDatastore: datastore "local-lvm" does not exist on pve`},
		"vm id taken": {func(a *fakeAPI, _ *doctor.Env) {
			a.vms = append(a.vms, pveapi.ClusterVM{VMID: 120, Name: "gitlab", Node: "pve"})
		}, `nodes.workers[0].vmId 120 is taken by VM "gitlab"`},
		"no ssh": {func(_ *fakeAPI, e *doctor.Env) {
			e.SSH = func(context.Context, *stacks.Config, string) (string, error) {
				return "", errors.New("ssh: handshake failed: unable to authenticate")
			}
		}, "unable to authenticate; load the key into your SSH agent"},
		"no dnsmasq": {func(_ *fakeAPI, e *doctor.Env) {
			e.SSH = func(context.Context, *stacks.Config, string) (string, error) {
				return "dnsmasq is not installed\n", errors.New("exit status 3")
			}
		}, "dnsmasq is not installed"},
		"no route": {func(_ *fakeAPI, e *doctor.Env) {
			e.Dial = func(context.Context, string, string) (net.Conn, error) {
				return nil, errors.New("dial tcp 10.10.0.1:22: connect: no route to host")
			}
		}, "sudo ip route add 10.10.0.0/24 via 192.168.122.70"},
		"host key changed": {func(_ *fakeAPI, e *doctor.Env) {
			e.ScanHostKey = func(context.Context, *stacks.Config) (ssh.PublicKey, error) { return strangerKey, nil }
		}, "192.168.122.70:22 presents the ssh-ed25519 key " + strangerFP + ", but proxmox.ssh.hostKey pins " + exampleHostKeyFP +
			", so every SSH connection to it is refused. If the host's keys changed (a reinstall), once " + strangerFP +
			" matches `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the host's console, replace the pin under proxmox.ssh in Pulumi.proxmox-homelab.yaml: `hostKey: " +
			strangerLine + "`; otherwise something between you and the host answers in its place"},
		"privileges missing": {func(a *fakeAPI, _ *doctor.Env) {
			a.lacks = map[string][]string{
				"/vms/110": {"VM.Config.CDROM"}, "/nodes/pve": {"Sys.Modify"},
				"/sdn/zones/localnetwork/vmbr1": {"SDN.Use"}, "/storage/local": {"Datastore.AllocateTemplate"},
			}
		}, "FAIL  perms     token root@pam!pulumi lacks VM.Config.CDROM on /vms/110 (nodes.controlPlanes[0]'s VM: created, configured, " +
			"powered off on destroy, its ISO ejected); Sys.Modify on /nodes/pve (the node downloads the Talos ISO (download-url)); " +
			"Datastore.AllocateTemplate on /storage/local (proxmox.isoDatastore holds the Talos ISO); " +
			"SDN.Use on /sdn/zones/localnetwork/vmbr1 (the VMs' NICs attach to proxmox.bridge vmbr1)"},
		"guest agent privilege of Proxmox VE 8": {func(a *fakeAPI, _ *doctor.Env) {
			a.version = "8.4.1"
			a.lacks = map[string][]string{"/vms/120": {"VM.Monitor"}}
		}, "lacks VM.Monitor on /vms/120"},
		"Image Factory unreachable": {func(a *fakeAPI, _ *doctor.Env) {
			a.fetchErr = errors.New("500 Can't connect to factory.talos.dev:443 (Connection timed out)")
		}, "FAIL  factory   Proxmox node pve cannot fetch https://factory.talos.dev/versions, where it downloads the Talos ISO from"},
		"host key unreadable": {func(_ *fakeAPI, e *doctor.Env) {
			e.ScanHostKey = func(context.Context, *stacks.Config) (ssh.PublicKey, error) {
				return nil, errors.New("unable to read the host key of 192.168.122.70:22: connection refused")
			}
		}, "FAIL  hostkey   unable to read the host key of 192.168.122.70:22: connection refused"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := healthyAPI()
			e := env(api)
			c.breakIt(api, &e)
			rs, out := run(t, e)
			assert.True(t, doctor.Failed(rs), out)
			assert.Contains(t, out, "FAIL")
			assert.Contains(t, out, c.want)
		})
	}
}

func TestDoctorAcceptsTheStacksOwnVMs(t *testing.T) {
	t.Parallel()
	api := healthyAPI()
	api.vms = append(api.vms, pveapi.ClusterVM{VMID: 110, Name: "cp-0", Node: "pve", Tags: "cluster-homelab;stack-proxmox-homelab;talos"})
	rs, out := run(t, env(api))
	assert.False(t, doctor.Failed(rs), out)

	// Same id and name but not tagged as this stack's: someone else's VM.
	api.vms[1].Tags = "talos"
	rs, out = run(t, env(api))
	assert.True(t, doctor.Failed(rs), out)
	assert.Contains(t, out, `nodes.controlPlanes[0].vmId 110 is taken by VM "cp-0"`)
}

func TestDoctorRouteWithRealSockets(t *testing.T) {
	t.Parallel()
	// A refused connection proves the route: listen, note the port, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	e := env(healthyAPI())
	var d net.Dialer
	e.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	_, out := run(t, e)
	assert.Contains(t, out, "ok    route")
}

// viaSSHProxy is the example stack (proxmox.access: ssh-proxy), and an env
// whose SSH connections go to host.
func viaSSHProxy(t *testing.T, host *sshtest.Server, signer ssh.Signer) (stacks.Source, doctor.Env) {
	t.Helper()
	src := stackstest.Example(t, stackstest.ProxmoxExample)

	e := env(healthyAPI())
	e.Dial = func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("a stack behind the SSH proxy must not be probed directly")
	}
	e.DialSSH = func(ctx context.Context, _ *stacks.Config) (*ssh.Client, error) {
		return ssh.Dial("tcp", host.Addr(), &ssh.ClientConfig{
			User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), //nolint:gosec // loopback test server
			Timeout:         5 * time.Second,
		})
	}
	return src, e
}

func TestDoctorChecksTheSSHProxy(t *testing.T) {
	t.Parallel()
	listening, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = listening.Close() })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	require.NoError(t, closed.Close())

	cases := map[string]struct {
		opts     sshtest.Options
		wantFail bool
		want     string
	}{
		"gateway answers": {sshtest.Options{Routes: map[string]string{"10.10.0.1:22": listening.Addr().String()}}, false,
			"proxmox.access ssh-proxy: the VM network 10.10.0.0/24 is reachable through the SSH proxy (one SSH connection to root@192.168.122.70:22)"},
		"gateway refuses": {sshtest.Options{Routes: map[string]string{"10.10.0.1:22": closedAddr}}, false,
			"10.10.0.0/24 is reachable through the SSH proxy"},
		"forwarding off": {sshtest.Options{NoForwarding: true}, true, "set `AllowTcpForwarding yes`"},
		"wrong key":      {sshtest.Options{}, true, "proxmox.access is ssh-proxy, but the helper cannot start"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			signer, pub, _ := sshtest.Key(t)
			if name != "wrong key" {
				c.opts.AuthorizedKey = pub
			}
			host := sshtest.New(t, c.opts)
			src, e := viaSSHProxy(t, host, signer)
			rs := doctor.Run(context.Background(), e, src, "proxmox-homelab")
			var b strings.Builder
			doctor.Print(&b, rs)
			assert.Equal(t, c.wantFail, doctor.Failed(rs), b.String())
			assert.Contains(t, b.String(), c.want)
			assert.NotContains(t, b.String(), "route", "no direct probe")
		})
	}
}

func TestDoctorInvalidConfig(t *testing.T) {
	t.Parallel()
	src := stackstest.StackSource(t, stackstest.ProxmoxExample, nil) // no token secret
	rs := doctor.Run(context.Background(), env(healthyAPI()), src, "proxmox-homelab")
	require.True(t, doctor.Failed(rs))
	var b strings.Builder
	doctor.Print(&b, rs)
	assert.Contains(t, b.String(), "proxmox.apiTokenSecret: is required")
}

// The doctor refuses what `up` refuses before anything runs, patches and
// Helm values that undo what the cluster relies on included.
func TestDoctorRefusesAPatchThatBreaksTheCluster(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, direct(t), "cluster", func(c map[string]any) {
		c["patches"] = map[string]any{"all": []any{"cluster:\n  network:\n    cni:\n      name: flannel\n"}}
	})
	rs := doctor.Run(context.Background(), env(healthyAPI()), src, "proxmox-homelab")
	require.True(t, doctor.Failed(rs))
	var b strings.Builder
	doctor.Print(&b, rs)
	assert.Contains(t, b.String(), "cluster.patches.all[0]: ")
	assert.Contains(t, b.String(), "flannel")
}

// The host key check with the doctor's real scanner against an in-process
// SSH host.
func TestDoctorShowsTheHostKey(t *testing.T) {
	t.Parallel()
	host := sshtest.New(t, sshtest.Options{})
	seen := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(host.HostKey)))
	fp := ssh.FingerprintSHA256(host.HostKey)
	target := host.Addr()
	cases := map[string]struct {
		pin      string
		level    doctor.Level
		want     string
		wantFail bool
	}{
		"none pinned": {"", doctor.Warn, target + " presents the ssh-ed25519 key " + fp + "; nothing is pinned, so SSH to the host accepts any key: once " + fp +
			" matches `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the host's console, add under proxmox.ssh in Pulumi.proxmox-homelab.yaml: `hostKey: " + seen + "`", false},
		"pinned key":         {seen, doctor.OK, target + " presents the ssh-ed25519 key " + fp + ", the one proxmox.ssh.hostKey pins", false},
		"pinned known_hosts": {"[" + host.Host + "]:" + strconv.Itoa(host.Port) + " " + seen, doctor.OK, "the one proxmox.ssh.hostKey pins", false},
		"another key":        {exampleHostKey, doctor.Fail, target + " presents the ssh-ed25519 key " + fp + ", but proxmox.ssh.hostKey pins " + exampleHostKeyFP, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(px map[string]any) {
				px["access"] = stacks.AccessDirect
				px["localForward"] = true // the test's SSH host listens on loopback
				px["ssh"] = map[string]any{"host": host.Host, "port": host.Port, "user": "root", "hostKey": c.pin}
			})
			e := env(healthyAPI())
			e.ScanHostKey = doctor.DefaultEnv().ScanHostKey
			rs := doctor.Run(context.Background(), e, src, "proxmox-homelab")
			var b strings.Builder
			doctor.Print(&b, rs)
			assert.Equal(t, c.wantFail, doctor.Failed(rs), b.String())
			var got []doctor.Result
			for _, r := range rs {
				if r.Check == "hostkey" {
					got = append(got, r)
				}
			}
			require.Len(t, got, 1, b.String())
			assert.Equal(t, c.level, got[0].Level)
			assert.Contains(t, got[0].Message, c.want)
			if c.pin == "" {
				assert.Contains(t, b.String(), "warn  config    proxmox.ssh.hostKey: not set", "the config says so too")
			}
		})
	}
}

// Without SSH to the host (no reservations, direct access) there is no key
// to check.
func TestDoctorSkipsTheHostKeyWithoutSSH(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(px map[string]any) {
		px["access"] = stacks.AccessDirect
		px["dnsmasq"] = map[string]any{"enabled": false}
	})
	e := env(healthyAPI())
	e.ScanHostKey = func(context.Context, *stacks.Config) (ssh.PublicKey, error) {
		return nil, errors.New("the host must not be contacted")
	}
	rs := doctor.Run(context.Background(), e, src, "proxmox-homelab")
	var b strings.Builder
	doctor.Print(&b, rs)
	assert.False(t, doctor.Failed(rs), b.String())
	assert.NotContains(t, b.String(), "hostkey")
}

// The Pulumi CLI the operations run is checked against the oldest the
// program runs with (issue 24: make doctor checks the installed one).
func TestDoctorChecksThePulumiCLI(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		version string
		err     error
		want    string
		failed  bool
	}{
		"the minimum":   {version: "v3.259.0\n", want: "ok    pulumi    the Pulumi CLI is 3.259.0 (3.259.0 or newer needed)"},
		"newer":         {version: "v3.274.1\n", want: "the Pulumi CLI is 3.274.1"},
		"older":         {version: "v3.200.0\n", want: "the Pulumi CLI is 3.200.0, older than 3.259.0, the oldest this program runs with", failed: true},
		"not installed": {err: errors.New(`exec: "pulumi": executable file not found in $PATH`), want: "unable to run `pulumi version`", failed: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := env(healthyAPI())
			e.PulumiVersion = func(context.Context) (string, error) { return tc.version, tc.err }
			rs, out := run(t, e)
			assert.Contains(t, out, tc.want)
			assert.Equal(t, tc.failed, doctor.Failed(rs), out)
		})
	}
}

// The VPS example's rescue key pin.
const vpsRescueKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEONt2yazdFZHClu6cvjSAE8PwBKuH8NrEluMIX2CTD2"

// vpsEnv: the node's Talos API refuses (not installed yet) and its rescue
// system presents key.
func vpsEnv(t *testing.T, key ssh.PublicKey, scanErr error) (doctor.Env, *[]string) {
	t.Helper()
	var scanned []string
	e := env(healthyAPI())
	e.Dial = func(_ context.Context, _, addr string) (net.Conn, error) {
		return nil, fmt.Errorf("dial tcp %s: connect: connection refused", addr)
	}
	e.ScanRescueKey = func(_ context.Context, c stacks.SSHConfig) (ssh.PublicKey, error) {
		scanned = append(scanned, fmt.Sprintf("%s@%s:%d", c.User, c.Host, c.Port))
		return key, scanErr
	}
	e.ScanHostKey = func(context.Context, *stacks.Config) (ssh.PublicKey, error) {
		t.Error("a VPS stack has no Proxmox host to scan")
		return nil, errors.New("no")
	}
	return e, &scanned
}

func runVPS(t *testing.T, e doctor.Env) ([]doctor.Result, string) {
	t.Helper()
	rs := doctor.Run(context.Background(), e, stackstest.Example(t, stackstest.VPSExample), "vps-prod")
	var b strings.Builder
	doctor.Print(&b, rs)
	return rs, b.String()
}

// make doctor checks a VPS stack's nodes too (issue 25): before the
// install, the rescue system's SSH and its host key against the pin; once
// Talos runs, its API.
func TestDoctorChecksVPSNodes(t *testing.T) {
	t.Parallel()
	e, scanned := vpsEnv(t, mustKey(vpsRescueKey), nil)
	rs, out := runVPS(t, e)
	assert.False(t, doctor.Failed(rs), out)
	assert.Contains(t, out, "ok    rescue    node-0 (nodes.controlPlanes[0]): the rescue system at 203.0.113.10:22 presents the ssh-ed25519 key")
	assert.Contains(t, out, "the one nodes.controlPlanes[0].rescue.hostKey pins")
	assert.Equal(t, []string{"root@203.0.113.10:22"}, *scanned)
	assert.NotContains(t, out, "only Proxmox stacks")

	e, _ = vpsEnv(t, strangerKey, nil)
	rs, out = runVPS(t, e)
	assert.True(t, doctor.Failed(rs), out)
	assert.Contains(t, out, "presents the ssh-ed25519 key "+strangerFP+", but nodes.controlPlanes[0].rescue.hostKey pins SHA256:")
	assert.Contains(t, out, "`nodes.controlPlanes[0].rescue.hostKey: "+strangerLine+"`")

	e, _ = vpsEnv(t, nil, errors.New("dial tcp 203.0.113.10:22: i/o timeout"))
	rs, out = runVPS(t, e)
	assert.True(t, doctor.Failed(rs), out)
	assert.Contains(t, out, "neither the Talos API (203.0.113.10:50000) nor the rescue system's SSH (203.0.113.10:22) answers")
	assert.Contains(t, out, "boot the server into its provider's rescue system")

	// Installed: the Talos API answers; no rescue system is needed or asked.
	e, scanned = vpsEnv(t, nil, errors.New("must not be asked"))
	e.Dial = func(_ context.Context, _, addr string) (net.Conn, error) {
		if !strings.HasSuffix(addr, ":50000") {
			return nil, errors.New("refused")
		}
		c1, c2 := net.Pipe()
		_ = c2.Close()
		return c1, nil
	}
	rs, out = runVPS(t, e)
	assert.False(t, doctor.Failed(rs), out)
	assert.Contains(t, out, "ok    talos     node-0 (nodes.controlPlanes[0]): the Talos API answers on 203.0.113.10:50000")
	assert.Empty(t, *scanned)
}

// Proxmox VE 9 dropped VM.Monitor: a token without it passes there, and one
// whose permissions cannot be read is a warning, not a failure.
func TestDoctorAsksForThePrivilegesOfTheVersion(t *testing.T) {
	t.Parallel()
	api := healthyAPI()
	api.lacks = map[string][]string{"/vms/110": {"VM.Monitor"}}
	rs, out := run(t, env(api))
	assert.False(t, doctor.Failed(rs), out)
	assert.Contains(t, api.fetched, "pve "+doctor.FactoryProbeURL, "the Proxmox node itself fetches the factory")

	api = healthyAPI()
	api.version = "8.4.1"
	api.lacks = map[string][]string{"/vms/110": {"VM.GuestAgent.Audit"}}
	rs, out = run(t, env(api))
	assert.False(t, doctor.Failed(rs), "Proxmox VE 8 has no VM.GuestAgent.Audit: %s", out)
	assert.Contains(t, out, "(Proxmox VE 8)")

	api = healthyAPI()
	api.permErr = errors.New("unable to read the token's permissions on /vms/110: 403 Permission check failed")
	rs, out = run(t, env(api))
	assert.False(t, doctor.Failed(rs), out)
	assert.Contains(t, out, "warn  perms     unable to read the token's permissions on /vms/110")
}

// With backup.schedule, the doctor warns when the newest in-cluster
// snapshot is older than two of the schedule's periods (issue 35, item
// B.8): a failing Job is seen nowhere else.
func TestDoctorWarnsOfStaleInClusterSnapshots(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, direct(t), "backup", func(b map[string]any) {
		b["target"] = "s3://backups/lab?endpoint=https://minio.lan:9000"
		b["recipients"] = []any{"age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"}
		b["schedule"] = "@daily"
		b["s3"] = map[string]any{"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3-key"}
	})
	src.SecretKeys = append(src.SecretKeys, src.Project+":backup")
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for age, want := range map[time.Duration]doctor.Level{10 * time.Hour: doctor.OK, 50 * time.Hour: doctor.Warn} {
		e := env(healthyAPI())
		e.Now = func() time.Time { return now }
		e.InClusterSnapshots = func(context.Context, *stacks.Config, string) ([]backupstore.Object, error) {
			return []backupstore.Object{{Name: "proxmox-homelab/in-cluster/0123456789abcdef/homelab-x.snap.age", Created: now.Add(-age)}}, nil
		}
		rs := doctor.Run(context.Background(), e, src, "proxmox-homelab")
		i := slices.IndexFunc(rs, func(r doctor.Result) bool { return r.Check == "snapshots" })
		require.GreaterOrEqual(t, i, 0, "%v", rs)
		assert.Equal(t, want, rs[i].Level, rs[i].Message)
	}
}

// With cluster.secureBoot the doctor checks that the host gives VMs a TPM
// (Proxmox VE 7.1 or newer) and says where their EFI and TPM state go;
// without it, nothing is said of it.
func TestDoctorChecksTheHostOfSecureBootVMs(t *testing.T) {
	t.Parallel()
	secureBoot := func(api *fakeAPI) string {
		t.Helper()
		src := stackstest.EditSection(t, direct(t), "cluster", func(c map[string]any) { c["secureBoot"] = true })
		src = stackstest.EditSection(t, src, "proxmox", func(px map[string]any) { delete(px, "bios") }) // ovmf, the default
		rs := doctor.Run(context.Background(), env(api), src, "proxmox-homelab")
		var b strings.Builder
		doctor.Print(&b, rs)
		return b.String()
	}
	out := secureBoot(healthyAPI())
	assert.Contains(t, out, `ok    secboot   Proxmox VE 9.1.1 gives each VM OVMF and a TPM 2.0 (swtpm); their EFI and TPM state disks go on datastore "local-lvm"`)

	api := healthyAPI()
	api.version = "7.0.13"
	out = secureBoot(api)
	assert.Contains(t, out, "FAIL  secboot   cluster.secureBoot: https://")
	assert.Contains(t, out, "runs Proxmox VE 7.0.13, whose VMs have no TPM (tpmstate0 came with 7.1)")

	_, out = run(t, env(healthyAPI()))
	assert.NotContains(t, out, "secboot")
}
