package doctor

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/shell"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

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
	host := proxmoxHost(s.view)
	if cfg.Cluster.SecureBoot {
		out = append(out, checkSecureBootHost(s, version, host.DiskDatastore))
	}

	nodes, err := api.Nodes(ctx)
	if err != nil {
		return append(out, Result{Fail, "api", "listing Proxmox nodes: " + err.Error()})
	}
	status := map[string]string{}
	for _, n := range nodes {
		status[n.Node] = n.Status
	}
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

// proxmoxHost is the Proxmox host settings the ProxmoxCluster uses: the
// stack's, with the component's defaults for what the stack leaves out.
func proxmoxHost(cfg *stacks.Config) proxmox.HostSettings {
	return program.ProxmoxArgs(cfg).WithDefaults().Proxmox
}
