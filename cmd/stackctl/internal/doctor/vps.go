package doctor

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/stacks"
)

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
