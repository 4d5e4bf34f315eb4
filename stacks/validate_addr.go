package stacks

import (
	"net/netip"
	"net/url"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// A loopback, unspecified, multicast or link-local address names no machine a
// stack can mean: a VPS node given 127.0.0.1 would have the install SSH into
// the operator's own machine. The components refuse them in the IP inputs
// (inputs.SpecialAddress); validateAddresses refuses them in the host fields.

// specialHost is specialAddr for a host name or IP literal: "localhost" and
// names under .localhost (RFC 6761) are loopback.
func specialHost(host string) (why string, loopback bool) {
	if a, err := netip.ParseAddr(host); err == nil {
		return inputs.SpecialAddress(a), a.Unmap().IsLoopback()
	}
	h := strings.ToLower(host)
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return "a loopback name: it reaches the machine that uses it, not another one", true
	}
	return "", false
}

// localForwardHint is added where a loopback address can be the local end of
// an SSH port forward.
const localForwardHint = "; if it is the local end of an SSH port forward (ssh -L) to the Proxmox host, set %s.localForward: true"

// The special IP addresses of the nodes, the gateway, the nameservers and
// the VIP are the components' rules (program.Validate); what is left here
// are the host names of the file's own keys, and the Proxmox API and SSH
// hosts, which may be the local end of a port forward the file declares.
func validateAddresses(d *Diagnostics, cfg *Config) {
	checkHost(d, "cluster.endpoint", cfg.Cluster.Endpoint, false)
	rulesOf(cfg.Platform).addresses(d, cfg)
}

// checkHost refuses a special address or name in a host field (host name or
// IPv4 address); an invalid host is validate.go's to report. A loopback one
// is allowed where it may be the local end of a port forward and the stack
// says it is.
func checkHost(d *Diagnostics, path, host string, loopbackOK bool) {
	if host == "" || !inputs.IsHost(host) {
		return
	}
	why, loopback := specialHost(host)
	switch {
	case why == "" || (loopback && loopbackOK):
	case loopback && strings.Contains(path, "proxmox."):
		section := path[:strings.Index(path, "proxmox.")+len("proxmox")]
		d.errorf(path, "%s is %s"+localForwardHint, host, why, section)
	default:
		d.errorf(path, "%s is %s", host, why)
	}
}

// checkImageURLHost checks the host and port of vps.imageUrl, which the
// rescue system fetches the image from. validateImageURL checks the rest;
// messages here name the host only, as the URL's query may be a credential.
func checkImageURLHost(d *Diagnostics, raw string) {
	const path = "vps.imageUrl"
	u, err := url.Parse(raw)
	if raw == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() && a.Zone() == "" {
		if why := inputs.SpecialAddress(a); why != "" {
			d.errorf(path, "host %s is %s", host, why)
		}
	} else if !inputs.IsHost(host) {
		d.errorf(path, "host %q is neither a host name nor an IPv4 or [IPv6] address", host)
	} else {
		checkHost(d, path, host, false)
	}
	if msg := inputs.URLPortProblem(u); msg != "" {
		d.errorf(path, "%s", msg)
	}
}
