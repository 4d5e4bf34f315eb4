// Package doctor checks, from the operator's machine, what `pulumi up` of a
// stack will need: the stack config itself, the Proxmox API with the stack's
// token (nodes, datastores, VM ids), the Proxmox host's SSH key against the
// pinned one, SSH to the host for dnsmasq, the way to the VM network (a
// direct route, or the ssh-proxy helper), and the local tools the program
// runs. Each check says plainly what is missing and how to fix it.
package doctor

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/blang/semver"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/shell"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Level is a check result's severity.
type Level string

// Levels, as printed.
const (
	OK   Level = "ok"
	Warn Level = "warn"
	Fail Level = "FAIL"
)

// Result is one check's outcome.
type Result struct {
	Level   Level
	Check   string
	Message string
}

// API is the part of the Proxmox API the doctor reads.
type API interface {
	Version(ctx context.Context) (string, error)
	Nodes(ctx context.Context) ([]pveapi.Node, error)
	Storages(ctx context.Context, node string) ([]pveapi.Storage, error)
	VMs(ctx context.Context) ([]pveapi.ClusterVM, error)
	Permissions(ctx context.Context, path string) (map[string]bool, error)
	QueryURLMetadata(ctx context.Context, node, rawURL string) (pveapi.URLMetadata, error)
	StorageContent(ctx context.Context, node, storage, content string) ([]pveapi.Volume, error)
	VMConfig(ctx context.Context, node string, vmid int) (map[string]any, error)
}

// The real Proxmox client is the doctor's API, checked at compile time.
var _ API = (*pveapi.Client)(nil)

// Env holds the doctor's seams to the outside world.
//
// The Proxmox seams (NewAPI, SSH, DialSSH, ScanHostKey) are called once per
// Proxmox section of the stack (proxmox, then each hosts entry's) with the
// stack as that section alone: its settings as cfg.Proxmox, its VM network
// as cfg.Cluster.Network, its nodes. A stack without hosts entries is
// passed as it is.
type Env struct {
	// NewAPI makes the Proxmox API client for the stack.
	NewAPI func(cfg *stacks.Config) (API, error)
	// SSH runs a command on the Proxmox host as the program would.
	SSH func(ctx context.Context, cfg *stacks.Config, command string) (string, error)
	// DialSSH connects to the Proxmox host (for the ssh-proxy check).
	DialSSH func(ctx context.Context, cfg *stacks.Config) (*ssh.Client, error)
	// ScanHostKey reads the key the Proxmox host presents, without login.
	ScanHostKey func(ctx context.Context, cfg *stacks.Config) (ssh.PublicKey, error)
	// ScanRescueKey reads the key a VPS's rescue system presents, without
	// login.
	ScanRescueKey func(ctx context.Context, c stacks.SSHConfig) (ssh.PublicKey, error)
	// Getenv reads the environment (NO_PROXY, PULUMI_BACKEND_URL, ...).
	Getenv func(string) string
	// Dial opens a TCP connection (net.Dialer.DialContext).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// PulumiVersion is what the pulumi CLI the operations run says of its
	// version (`pulumi version`); nil: not checked.
	PulumiVersion func(ctx context.Context) (string, error)
	// StackOutputs are the stack's outputs, secrets shown (`pulumi stack
	// output --json --show-secrets`); nil: the access files' certificates
	// are not checked.
	StackOutputs func(ctx context.Context, stack string) (map[string]any, error)
	// Now is the clock of the certificates' and snapshots' checks
	// (time.Now when nil).
	Now func() time.Time
	// InClusterSnapshots lists the stack's in-cluster snapshots at
	// backup.target, newest first; nil: their age is not checked.
	InClusterSnapshots func(ctx context.Context, cfg *stacks.Config, stack string) ([]backupstore.Object, error)
	// Timeout bounds each network check.
	Timeout time.Duration
}

// DefaultEnv is the real world.
func DefaultEnv() Env {
	d := &net.Dialer{}
	return Env{
		NewAPI: func(cfg *stacks.Config) (API, error) {
			px := cfg.Proxmox
			return pveapi.New(px.Endpoint, px.APITokenID, px.APITokenSecret.Reveal(), pveapi.Options{Insecure: px.Insecure, Retries: 1})
		},
		SSH:           runSSH,
		DialSSH:       dialSSH,
		ScanHostKey:   scanHostKey,
		ScanRescueKey: access.ScanHostKey,
		Getenv:        os.Getenv,
		Dial:          d.DialContext,
		Timeout:       5 * time.Second,
		InClusterSnapshots: func(ctx context.Context, cfg *stacks.Config, stack string) ([]backupstore.Object, error) {
			opts, err := backup.StoreOptions(cfg.Backup)
			if err != nil {
				return nil, err
			}
			store, err := backupstore.Open(ctx, cfg.Backup.Target, opts)
			if err != nil {
				return nil, err
			}
			defer func() { _ = store.Close() }()
			return backup.ListInCluster(ctx, store, stack)
		},
	}
}

// checkInClusterSnapshots warns when the newest in-cluster snapshot is
// older than two periods of backup.schedule: a failing Job is seen
// nowhere else.
func checkInClusterSnapshots(ctx context.Context, env Env, cfg *stacks.Config, stack string) Result {
	snapshots, err := env.InClusterSnapshots(ctx, cfg, stack)
	if err != nil {
		return Result{Warn, "snapshots", fmt.Sprintf("%v; the in-cluster snapshots' age is not checked", err)}
	}
	now := time.Now
	if env.Now != nil {
		now = env.Now
	}
	f, err := backup.InClusterFreshness(cfg.Backup.Schedule, snapshots, now())
	if err != nil {
		return Result{Warn, "snapshots", err.Error()}
	}
	if f.Stale {
		return Result{Warn, "snapshots", f.Message}
	}
	return Result{OK, "snapshots", f.Message}
}

// WithPulumi is env with PulumiVersion running the CLI at path.
func (env Env) WithPulumi(path string) Env {
	env.PulumiVersion = func(ctx context.Context) (string, error) {
		out, err := exec.CommandContext(ctx, path, "version").Output() //nolint:gosec // the operator's own CLI
		return string(out), err
	}
	env.StackOutputs = func(ctx context.Context, stack string) (map[string]any, error) {
		cmd := exec.CommandContext(ctx, path, "stack", "output", "--json", "--show-secrets", "--stack", stack) //nolint:gosec // the operator's own CLI
		var stderr strings.Builder
		cmd.Stderr = &stderr
		raw, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("unable to read the stack's outputs: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		var outs map[string]any
		if err := json.Unmarshal(raw, &outs); err != nil {
			return nil, fmt.Errorf("unable to read the stack's outputs: %w", err)
		}
		return outs, nil
	}
	return env
}

// Run loads the stack config, with the checks `up` runs before anything
// (program.Validate: what patches and Helm values may not undo too), and
// runs every check that applies to it.
func Run(ctx context.Context, env Env, src stacks.Source, stack string) []Result {
	cfg, diags := program.Validate(src)
	var out []Result
	for _, w := range diags.Warnings {
		out = append(out, Result{Warn, "config", w.String()})
	}
	if err := diags.Err(); err != nil {
		return append(out, Result{Fail, "config", err.Error()})
	}
	out = append(out, Result{OK, "config", fmt.Sprintf("stack %s is a valid %s stack with %d nodes", stack, cfg.Platform, len(cfg.Nodes.All()))})
	if env.PulumiVersion != nil {
		out = append(out, checkPulumiCLI(ctx, env))
	}
	if env.StackOutputs != nil {
		out = append(out, checkCertificates(ctx, env, stack)...)
	}
	if env.InClusterSnapshots != nil && cfg.Backup.Schedule != "" {
		out = append(out, checkInClusterSnapshots(ctx, env, cfg, stack))
	}
	if check, ok := platformChecks[cfg.Platform]; ok {
		out = append(out, check(ctx, env, cfg, stack)...)
	}
	return out
}

// platformChecks are each platform's own checks, by its stack-file name.
var platformChecks = map[stacks.Platform]func(ctx context.Context, env Env, cfg *stacks.Config, stack string) []Result{
	stacks.PlatformProxmox: checkProxmox,
	stacks.PlatformVPS: func(ctx context.Context, env Env, cfg *stacks.Config, _ string) []Result {
		return checkVPS(ctx, env, cfg)
	},
	stacks.PlatformLocal: checkLocal,
}

// checkProxmox checks, for each Proxmox section (proxmox, then each hosts
// entry's), the Proxmox API, the host's key and SSH, and the way to the
// section's VM network.
func checkProxmox(ctx context.Context, env Env, cfg *stacks.Config, stack string) []Result {
	var out []Result
	for _, s := range sectionsOf(cfg) {
		if s.Gone {
			out = append(out, s.named(Result{Level: Warn, Check: "host", Message: fmt.Sprintf(
				"lost for good (%s.gone): not checked, nothing asks it anything; remove its nodes, then its entry (docs/multi-host.md#a-host-lost-for-good)",
				strings.TrimSuffix(s.Path, ".proxmox"))})...)
			continue
		}
		out = append(out, s.named(checkSection(forSection(ctx, s), env, cfg, s, stack)...)...)
	}
	return out
}

// checkSection is checkProxmox's checks of one section.
func checkSection(ctx context.Context, env Env, cfg *stacks.Config, s section, stack string) []Result {
	out := checkAPI(ctx, env, cfg, s, stack)
	viaProxy := s.Access == stacks.AccessSSHProxy
	if s.DNSMasqEnabled() || viaProxy {
		out = append(out, checkHostKey(ctx, env, s, stack))
	}
	if s.DNSMasqEnabled() {
		out = append(out, checkSSH(ctx, env, s))
	}
	if viaProxy {
		out = append(out, checkProxy(ctx, env, s))
	} else {
		out = append(out, checkRoute(ctx, env, s))
	}
	return out
}

// Failed reports whether any result is a failure.
func Failed(rs []Result) bool {
	return slices.ContainsFunc(rs, func(r Result) bool { return r.Level == Fail })
}

// Print writes results one per line.
func Print(w io.Writer, rs []Result) {
	for _, r := range rs {
		_, _ = fmt.Fprintf(w, "%-4s  %-8s  %s\n", r.Level, r.Check, r.Message)
	}
}

// checkAPI checks a section's Proxmox API with its token: the Proxmox
// nodes, datastores and Image Factory of its VMs, the token's privileges,
// its VM ids, and the CSI plugin's datastore (proxmox's, without hosts
// entries).
func checkAPI(ctx context.Context, env Env, cfg *stacks.Config, s section, stack string) []Result {
	px := *s.ProxmoxConfig
	api, err := env.NewAPI(s.view)
	if err != nil {
		return []Result{{Fail, "api", err.Error()}}
	}
	ctx, cancel := context.WithTimeout(ctx, 4*env.Timeout)
	defer cancel()
	version, err := api.Version(ctx)
	if err != nil {
		return []Result{{Fail, "api", explainAPI(s, err)}}
	}
	out := []Result{{OK, "api", fmt.Sprintf("%s answers with token %s (Proxmox VE %s)", px.Endpoint, px.APITokenID, version)}}

	nodes, err := api.Nodes(ctx)
	if err != nil {
		return append(out, Result{Fail, "api", "listing Proxmox nodes: " + err.Error()})
	}
	status := map[string]string{}
	for _, n := range nodes {
		status[n.Node] = n.Status
	}
	host := proxmoxHost(s.view)
	used := map[string]bool{}
	for _, n := range s.refs {
		used[n.ProxmoxNode] = true
	}
	for _, name := range sortedKeys(used) {
		switch st, ok := status[name]; {
		case !ok:
			out = append(out, Result{Fail, "node", fmt.Sprintf("Proxmox node %q does not exist (known: %s); fix %s or the nodes' proxmoxNode", name, strings.Join(sortedKeys(status), ", "), s.key("node"))})
			continue
		case st != "online":
			out = append(out, Result{Fail, "node", fmt.Sprintf("Proxmox node %q is %s", name, st)})
			continue
		}
		out = append(out, checkStorage(ctx, api, name, host.ISODatastore, "iso", s.key("isoDatastore")))
		out = append(out, checkStorage(ctx, api, name, host.DiskDatastore, "images", s.key("diskDatastore")))
		out = append(out, checkFactory(ctx, api, name))
	}
	out = append(out, checkPrivileges(ctx, api, s, version))

	vms, err := api.VMs(ctx)
	if err != nil {
		return append(out, Result{Fail, "vmids", "listing VMs: " + err.Error()})
	}
	tag := proxmox.StackTag(stack)
	var clashes []string
	for _, ref := range s.refs {
		for _, vm := range vms {
			if vm.VMID != ref.VMID {
				continue
			}
			if vm.Name == ref.Name && slices.Contains(pveapi.TagList(vm.Tags), tag) {
				continue // this stack's own VM from an earlier up
			}
			clashes = append(clashes, fmt.Sprintf("%s.vmId %d is taken by VM %q on %s", ref.Path, ref.VMID, vm.Name, vm.Node))
		}
	}
	if len(clashes) > 0 {
		out = append(out, Result{Fail, "vmids", strings.Join(clashes, "; ")})
	} else {
		out = append(out, Result{OK, "vmids", "every VM id is free or already this stack's"})
	}
	// The plugin serves the proxmox host alone, in a stack without hosts
	// entries (the ProxmoxCluster's rule).
	if s.Host == "" && cfg.Storage.ProxmoxCSI.Enabled() {
		out = append(out, checkCSI(ctx, env, api, cfg, stack)...)
	}
	return out
}

func checkStorage(ctx context.Context, api API, node, name, content, key string) Result {
	stores, err := api.Storages(ctx, node)
	if err != nil {
		return Result{Fail, "storage", fmt.Sprintf("listing datastores of %s: %v", node, err)}
	}
	for _, s := range stores {
		if s.Storage != name {
			continue
		}
		if !s.HasContent(content) {
			return Result{Fail, "storage", fmt.Sprintf("%s: datastore %q on %s does not allow content %q (it has %q); enable it under Datacenter > Storage", key, name, node, content, s.Content)}
		}
		return Result{OK, "storage", fmt.Sprintf("datastore %q on %s holds %s", name, node, content)}
	}
	return Result{Fail, "storage", fmt.Sprintf("%s: datastore %q does not exist on %s", key, name, node)}
}

func explainAPI(s section, err error) string {
	px := s.ProxmoxConfig
	var api *pveapi.APIError
	msg := err.Error()
	switch {
	case errors.As(err, &api) && api.Status == 401:
		return fmt.Sprintf("%s rejects token %s: check %s and the secret (make secret KEY=%s)", px.Endpoint, px.APITokenID, s.key("apiTokenId"), s.key("apiTokenSecret"))
	case errors.As(err, &api) && api.Status == 403:
		return fmt.Sprintf("token %s lacks a permission: %s (give the token's user the PVEVMAdmin and PVEDatastoreUser roles, or clear 'Privilege Separation')", px.APITokenID, api.Message)
	case strings.Contains(msg, "certificate") && !px.Insecure:
		return fmt.Sprintf("%s: the certificate is not trusted (%v); install a trusted one, or set %s: true for a self-signed host", px.Endpoint, err, s.key("insecure"))
	default:
		return fmt.Sprintf("%s is not reachable from this machine: %v", px.Endpoint, err)
	}
}

func checkSSH(ctx context.Context, env Env, s section) Result {
	ssh := s.SSH
	dir := cmp.Or(s.DNSMasq.ConfigDir, proxmox.DefaultDNSMasqDir)
	ctx, cancel := context.WithTimeout(ctx, 2*env.Timeout)
	defer cancel()
	out, err := env.SSH(ctx, s.view, dnsmasqCheckCommand(dir))
	target := fmt.Sprintf("%s@%s:%d", ssh.User, ssh.Host, ssh.Port)
	if err != nil {
		hint := "load the key into your SSH agent (ssh-add), or set " + s.key("ssh.privateKeyFile")
		if strings.TrimSpace(out) != "" {
			hint = strings.TrimSpace(out)
		}
		return Result{Fail, "ssh", fmt.Sprintf("%s: %v; %s", target, err, hint)}
	}
	return Result{OK, "ssh", fmt.Sprintf("%s works; dnsmasq is installed and %s exists", target, dir)}
}

// dnsmasqCheckCommand is the shell command checkSSH runs on the host: dnsmasq
// is installed and dir is a directory. dir is quoted, so the host's shell
// reads it as one word whatever it holds.
func dnsmasqCheckCommand(dir string) string {
	return "dir=" + shell.Quote(dir) + "; command -v dnsmasq >/dev/null || { echo 'dnsmasq is not installed'; exit 3; }; " +
		`test -d "$dir" || { printf 'no directory %s\n' "$dir"; exit 3; }; echo ready`
}

// checkHostKey shows the key the Proxmox host presents and compares it with
// its section's ssh.hostKey (proxmox.ssh.hostKey), so a pin can be taken
// (after checking it on the host's console) and a mismatch is explained
// before `up` trips over it.
func checkHostKey(ctx context.Context, env Env, s section, stack string) Result {
	conn := s.SSH
	pinPath := s.key("ssh.hostKey")
	target := net.JoinHostPort(conn.Host, strconv.Itoa(conn.Port))
	ctx, cancel := context.WithTimeout(ctx, env.Timeout)
	defer cancel()
	key, err := env.ScanHostKey(ctx, s.view)
	if err != nil {
		return Result{Fail, "hostkey", err.Error()}
	}
	// Load has validated the pin.
	pin, _ := stacks.ParseHostKey(conn.HostKey)
	fp := ssh.FingerprintSHA256(key)
	seen := fmt.Sprintf("%s presents the %s key %s", target, key.Type(), fp)
	check := fmt.Sprintf("once %s matches `ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub` on the host's console", fp, keyFileType(key))
	add := fmt.Sprintf("under %s in Pulumi.%s.yaml: `hostKey: %s`", s.key("ssh"), stack, authorizedKey(key))
	switch {
	case !pin.IsSet():
		return Result{Warn, "hostkey", fmt.Sprintf("%s; nothing is pinned, so SSH to the host accepts any key: %s, add %s", seen, check, add)}
	case pin.Matches(key):
		return Result{OK, "hostkey", fmt.Sprintf("%s, the one %s pins", seen, pinPath)}
	default:
		return Result{Fail, "hostkey", fmt.Sprintf("%s, but %s pins %s, so every SSH connection to it is refused. "+
			"If the host's keys changed (a reinstall), %s, replace the pin %s; otherwise something between you and the host answers in its place",
			seen, pinPath, pin.Fingerprint, check, add)}
	}
}

// checkVPS checks each VPS node from this machine: its Talos API (port
// 50000) once Talos runs there; before that, the rescue system the install
// logs into (reachable, and its host key against the node's pin).
func checkVPS(ctx context.Context, env Env, cfg *stacks.Config) []Result {
	var out []Result
	for _, ref := range cfg.Nodes.Refs() {
		out = append(out, checkVPSNode(ctx, env, ref))
	}
	return out
}

func checkVPSNode(ctx context.Context, env Env, ref stacks.NodeRef) Result {
	ctx, cancel := context.WithTimeout(ctx, env.Timeout)
	defer cancel()
	node := fmt.Sprintf("%s (%s)", ref.Name, ref.Path)
	talosAddr := net.JoinHostPort(ref.IP, strconv.Itoa(talosapi.ApidPort))
	if c, err := env.Dial(ctx, "tcp", talosAddr); err == nil {
		_ = c.Close()
		return Result{OK, "talos", fmt.Sprintf("%s: the Talos API answers on %s: Talos runs there, `up` needs no rescue system", node, talosAddr)}
	}
	r := ref.Rescue
	target := net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	pinPath := ref.Path + ".rescue.hostKey"
	key, err := env.ScanRescueKey(ctx, stacks.SSHConfig{Host: r.Host, Port: r.Port, User: r.User, HostKey: r.HostKey})
	if err != nil {
		return Result{Fail, "rescue", fmt.Sprintf("%s: neither the Talos API (%s) nor the rescue system's SSH (%s) answers (%v): "+
			"boot the server into its provider's rescue system before `up`", node, talosAddr, target, err)}
	}
	// Load has validated the pin.
	pin, _ := stacks.ParseHostKey(r.HostKey)
	fp := ssh.FingerprintSHA256(key)
	seen := fmt.Sprintf("%s: the rescue system at %s presents the %s key %s", node, target, key.Type(), fp)
	add := fmt.Sprintf("`%s: %s` once %s matches the fingerprint the provider shows", pinPath, authorizedKey(key), fp)
	switch {
	case !pin.IsSet():
		return Result{Warn, "rescue", fmt.Sprintf("%s; nothing is pinned, so the install accepts any key: set %s", seen, add)}
	case pin.Matches(key):
		return Result{OK, "rescue", fmt.Sprintf("%s, the one %s pins", seen, pinPath)}
	default:
		return Result{Fail, "rescue", fmt.Sprintf("%s, but %s pins %s, so the install refuses to connect. "+
			"Many rescue systems make new keys at every boot: set %s; otherwise something answers in the server's place",
			seen, pinPath, pin.Fingerprint, add)}
	}
}

// checkRoute probes the section's VM network's gateway (in a home lab the
// Proxmox host's own address on the VM bridge). A refused connection
// proves the route as well as an accepted one; a timeout or "no route"
// does not.
func checkRoute(ctx context.Context, env Env, s section) Result {
	gw := s.view.Cluster.Network.Gateway
	prefix, _ := s.view.NodeNetwork() // the file's prefix length, or the ProxmoxCluster's default
	ctx, cancel := context.WithTimeout(ctx, env.Timeout)
	defer cancel()
	conn, err := env.Dial(ctx, "tcp", net.JoinHostPort(gw, strconv.Itoa(s.SSH.Port)))
	if err == nil {
		_ = conn.Close()
	}
	if err == nil || errors.Is(err, syscall.ECONNREFUSED) {
		return Result{OK, "route", fmt.Sprintf("%s %s: the VM network %s is reachable from here (gateway %s answers)", s.key("access"), stacks.AccessDirect, prefix, gw)}
	}
	return Result{Fail, "route", fmt.Sprintf("the VM network %s is not reachable from this machine (%v). "+
		"The Talos and Kubernetes providers run here and must reach the nodes: add a route through the Proxmox host "+
		"(e.g. `sudo ip route add %s via %s`, with IP forwarding on the host), "+
		"or set %s: %s to tunnel through the host over SSH", prefix, err, prefix, s.SSH.Host, s.key("access"), stacks.AccessSSHProxy)}
}

// checkProxy starts the ssh-proxy helper as make up would, for the
// section alone, and opens a tunnel through it to the section's VM
// network's gateway. As with the direct route, a refusal from the gateway
// proves the way there.
func checkProxy(ctx context.Context, env Env, sec section) Result {
	gw := sec.view.Cluster.Network.Gateway
	prefix, _ := sec.view.NodeNetwork()
	ctx, cancel := context.WithTimeout(ctx, 4*env.Timeout)
	defer cancel()
	s, err := access.Start(ctx, sec.view, access.Options{
		Dial: func(ctx context.Context, _ stacks.ProxmoxSection) (*ssh.Client, error) {
			return env.DialSSH(ctx, sec.view)
		},
		Getenv: env.Getenv,
	})
	if err != nil {
		return Result{Fail, "access", fmt.Sprintf("%s is %s, but the helper cannot start: %v; "+
			"load the key into your SSH agent (ssh-add), or set %s", sec.key("access"), stacks.AccessSSHProxy, err, sec.key("ssh.privateKeyFile"))}
	}
	defer func() { _ = s.Close() }()
	target := net.JoinHostPort(gw, strconv.Itoa(sec.SSH.Port))
	status, body, err := connectVia(ctx, s.URL, target)
	via := fmt.Sprintf("through the SSH proxy (one SSH connection to %s)", s.Target)
	switch {
	case err != nil:
		return Result{Fail, "access", fmt.Sprintf("the local proxy did not answer: %v", err)}
	case status == http.StatusOK, strings.Contains(strings.ToLower(body), "refused"):
		return Result{OK, "access", fmt.Sprintf("%s %s: the VM network %s is reachable %s (gateway %s answers)", sec.key("access"), stacks.AccessSSHProxy, prefix, via, gw)}
	case strings.Contains(body, "prohibited"):
		return Result{Fail, "access", fmt.Sprintf("%s refuses port forwarding (%s): set `AllowTcpForwarding yes` in the host's /etc/ssh/sshd_config "+
			"(or for this user in a Match block) and reload sshd", s.Target, strings.TrimSpace(body))}
	default:
		return Result{Fail, "access", fmt.Sprintf("the Proxmox host cannot reach the VM network's gateway %s: %s", target, strings.TrimSpace(body))}
	}
}

// connectVia asks the proxy for a tunnel, as an HTTPS_PROXY client does,
// and returns its status and (for a refusal) its message.
func connectVia(ctx context.Context, proxyURL, target string) (int, string, error) {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return 0, "", err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = c.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Host: target}, Host: target, Header: http.Header{}}
	if err := req.Write(c); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, "", nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body), nil
}

// MinPulumiCLI is the oldest Pulumi CLI the program runs with: the version
// of the Go SDK it is built with (resource hooks, replaceWith, the
// engine's readStackOutputs function), as Pulumi.yaml's
// requiredPulumiVersion and the README say.
const MinPulumiCLI = "3.259.0"

// checkPulumiCLI checks the version of the pulumi CLI the operations run.
func checkPulumiCLI(ctx context.Context, env Env) Result {
	out, err := env.PulumiVersion(ctx)
	if err != nil {
		return Result{Fail, "pulumi", fmt.Sprintf("unable to run `pulumi version`: %v; install the Pulumi CLI %s or newer", err, MinPulumiCLI)}
	}
	have, err := semver.ParseTolerant(strings.TrimSpace(out))
	if err != nil {
		return Result{Warn, "pulumi", fmt.Sprintf("`pulumi version` says %q, not a version this check reads; the program needs %s or newer", strings.TrimSpace(out), MinPulumiCLI)}
	}
	if have.LT(semver.MustParse(MinPulumiCLI)) {
		return Result{Fail, "pulumi", fmt.Sprintf("the Pulumi CLI is %s, older than %s, the oldest this program runs with (resource hooks, replaceWith); upgrade it", have, MinPulumiCLI)}
	}
	return Result{OK, "pulumi", fmt.Sprintf("the Pulumi CLI is %s (%s or newer needed)", have, MinPulumiCLI)}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// proxmoxHost is the Proxmox host settings the ProxmoxCluster uses: the
// stack's, with the component's defaults for what the stack leaves out.
func proxmoxHost(cfg *stacks.Config) proxmox.HostSettings {
	return program.ProxmoxArgs(cfg).WithDefaults().Proxmox
}

// checkCertificates says until when the client certificates of the
// stack's talosconfig and kubeconfig are valid, and warns of one that
// expires within certs.RenewWithin: the Talos provider renews them only on
// an `up` in that window, so a cluster left alone longer locks its
// operator out.
func checkCertificates(ctx context.Context, env Env, stack string) []Result {
	outs, err := env.StackOutputs(ctx, stack)
	if err != nil {
		return []Result{{Warn, "certs", fmt.Sprintf("%v; the client certificates' expiry is not checked", err)}}
	}
	now := time.Now
	if env.Now != nil {
		now = env.Now
	}
	var out []Result
	for _, name := range program.AccessFiles {
		text, _ := outs[name].(string)
		if text == "" {
			out = append(out, Result{OK, "certs", fmt.Sprintf("stack %s has no %s output yet (no up): nothing to check", stack, name)})
			continue
		}
		notAfter, err := program.AccessFileExpiry(name, text)
		switch {
		case err != nil:
			out = append(out, Result{Warn, "certs", fmt.Sprintf("the %s output: %v", name, err)})
		case certs.Warning(name, notAfter, now()) != "":
			out = append(out, Result{Warn, "certs", certs.Warning(name, notAfter, now())})
		default:
			out = append(out, Result{OK, "certs", fmt.Sprintf("the %s client certificate is valid until %s", name, notAfter.UTC().Format(time.DateOnly))})
		}
	}
	return out
}
