// This file is the CONNECT proxy of a stack with several Proxmox sections
// (proxmox and hosts entries): each destination goes through the SSH
// connection (a Proxy) of the section whose VMs it reaches; one of a
// section with access direct is refused, since this machine reaches it
// itself (NO_PROXY lists it).

package access

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrDirect is returned for a destination of a section with access direct:
// this machine reaches it without the proxy.
var ErrDirect = errors.New("destination is reached directly, not through the proxy")

// ErrGone is what the proxy answers for a destination of a host lost for
// good (hosts[i].gone).
var ErrGone = errors.New("destination is on a host that is gone")

// way is one section's destinations and the Proxy that tunnels to them
// (nil for a section reached directly).
type way struct {
	*route
	proxy *Proxy
}

// router sends each CONNECT to the way that reaches its destination.
type router struct {
	ways []way
	// hint is added to the log line of a destination no section reaches.
	hint string
	log  func(format string, args ...any)
}

// find is the way to host (a name or an IP): a name is the section's
// that lists it; an IP is its node's section, else the section with the
// narrowest network (or address) holding it, the first of equals.
func (rt *router) find(host string) (way, bool) {
	a, err := netip.ParseAddr(host)
	if err != nil {
		i := slices.IndexFunc(rt.ways, func(w way) bool {
			return slices.ContainsFunc(w.hosts, func(h string) bool { return strings.EqualFold(h, host) })
		})
		if i < 0 {
			return way{}, false
		}
		return rt.ways[i], true
	}
	a = a.Unmap()
	if i := slices.IndexFunc(rt.ways, func(w way) bool { return slices.Contains(w.nodes, a) }); i >= 0 {
		return rt.ways[i], true
	}
	best, bits := -1, -1
	for i, w := range rt.ways {
		for _, p := range w.prefixes {
			if p.Contains(a) && p.Bits() > bits {
				best, bits = i, p.Bits()
			}
		}
	}
	if best < 0 {
		return way{}, false
	}
	return rt.ways[best], true
}

// check finds the way to hostport and the address to dial through it.
func (rt *router) check(hostport string) (way, string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return way{}, "", fmt.Errorf("unable to parse %q as host:port: %w", hostport, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return way{}, "", fmt.Errorf("%q is not a port", port)
	}
	shown := host
	if a, err := netip.ParseAddr(host); err == nil {
		shown = a.String() // as Proxy.Check says it
	}
	w, ok := rt.find(host)
	switch {
	case !ok:
		return way{}, "", fmt.Errorf("%s: %w", shown, ErrNotAllowed)
	case w.gone:
		return way{}, "", fmt.Errorf("%s: %w: it is a VM destination of %s, which is lost for good (%s.gone): nothing of it is contacted",
			shown, ErrGone, w.label(), strings.TrimSuffix(w.section.Path, ".proxmox"))
	case w.proxy == nil && w.servers:
		return way{}, "", fmt.Errorf("%s: %w: it is a rented server of %s, which this machine reaches itself on its public address (NO_PROXY lists it)",
			shown, ErrDirect, w.label())
	case w.proxy == nil:
		return way{}, "", fmt.Errorf("%s: %w: it is a VM destination of %s, whose %s.access is %s; "+
			"this machine reaches it itself (NO_PROXY lists it), or set %s.access: ssh-proxy to tunnel through that host",
			shown, ErrDirect, w.label(), w.section.Path, w.section.Access, w.section.Path)
	}
	dst, err := w.proxy.Check(hostport)
	return w, dst, err
}

// ServeHTTP implements the CONNECT method.
func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT is supported", http.StatusMethodNotAllowed)
		return
	}
	to, dst, err := rt.check(r.Host)
	if err != nil {
		hint := rt.hint
		if errors.Is(err, ErrDirect) || errors.Is(err, ErrGone) {
			hint = ""
		}
		refuse(w, r, err, hint, rt.logf)
		return
	}
	to.proxy.connect(w, r, dst)
}

// dial opens a TCP connection to addr through the way that reaches it.
func (rt *router) dial(ctx context.Context, addr string) (net.Conn, error) {
	to, dst, err := rt.check(addr)
	if err != nil {
		return nil, err
	}
	return to.proxy.dial(ctx, dst)
}

// tunnels are the ways through SSH.
func (rt *router) tunnels() []way {
	var out []way
	for _, w := range rt.ways {
		if w.proxy != nil {
			out = append(out, w)
		}
	}
	return out
}

// connect opens every SSH connection at once; the error is the first
// section's, in the file's order, that failed.
func (rt *router) connect(ctx context.Context, describe func(way) string) error {
	ts := rt.tunnels()
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, w := range ts {
		wg.Go(func() { errs[i] = w.proxy.Connect(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("unable to start the ssh-proxy (SSH to %s): %w", describe(ts[i]), err)
		}
	}
	return nil
}

// close closes every SSH connection.
func (rt *router) close() error {
	var errs []error
	for _, w := range rt.tunnels() {
		errs = append(errs, w.proxy.Close())
	}
	return errors.Join(errs...)
}

func (rt *router) logf(format string, args ...any) {
	if rt.log != nil {
		rt.log(format, args...)
	}
}
