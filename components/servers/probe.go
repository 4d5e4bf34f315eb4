package servers

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaintenanceProbe reports whether the node at ip answers the Talos API in
// maintenance mode, that is without a client certificate. Such a node runs
// Talos from its disk already (after `vps.onDestroy: reset`, or an earlier
// install whose stack is gone): the rescue install has nothing to do, and its
// SSH connection would fail, since Talos has no SSH.
type MaintenanceProbe func(ctx context.Context, ip string) bool

// maintenanceProbeTimeout bounds one probe: a rescue system refuses port
// 50000 at once, and a filtered port must not hold the program for long.
const maintenanceProbeTimeout = 5 * time.Second

// TalosMaintenanceProbe asks the node's Talos API for its version over TLS
// without a client certificate, as `talosctl version --insecure` does. Only
// a maintenance-mode node accepts that connection: a configured node's apid
// demands the cluster's client certificate and fails the handshake. An
// answer, or Unimplemented (the maintenance API of some versions lacks
// Version), both mean the server took an unauthenticated request.
func TalosMaintenanceProbe(port int) MaintenanceProbe {
	return func(ctx context.Context, ip string) bool {
		ctx, cancel := context.WithTimeout(ctx, maintenanceProbeTimeout)
		defer cancel()
		c, err := client.New(ctx,
			// Maintenance mode serves a self-signed certificate: nothing to
			// verify it against, and nothing is sent but the request.
			client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}), //nolint:gosec // see above
			client.WithEndpoints(net.JoinHostPort(ip, strconv.Itoa(port))),
		)
		if err != nil {
			return false
		}
		defer c.Close() //nolint:errcheck // nothing to do about a failed close of a probe
		_, err = c.Version(ctx)
		return err == nil || status.Code(err) == codes.Unimplemented
	}
}
