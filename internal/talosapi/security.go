package talosapi

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// Volume is one of a node's volumes as its volume manager reports it.
type Volume struct {
	// ID is the volume's ("STATE", "EPHEMERAL", "u-<name>" for a user
	// volume).
	ID string
	// Ready: provisioned, unlocked where encrypted, and mounted or ready
	// to be.
	Ready bool
	// Encryption is the provider that unlocked it ("luks2"), or "none".
	Encryption string
	// Error is why the volume manager failed it, when it did.
	Error string
}

// SecureBoot reads the node's SecurityState (talos v1.13.9
// internal/app/machined/pkg/controllers/runtime/security_state.go: the
// firmware's Secure Boot state, read from its EFI variables).
func (c *Client) SecureBoot(ctx context.Context, node string) (bool, error) {
	var on bool
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		st, err := safe.StateGetByID[*runtime.SecurityState](ctx, tc.COSI, runtime.SecurityStateID)
		if err != nil {
			return err
		}
		on = st.TypedSpec().SecureBoot
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("unable to read the security state of node %s: %w", node, err)
	}
	return on, nil
}

// Volumes reads the node's VolumeStatus resources, in the order of their
// IDs.
func (c *Client) Volumes(ctx context.Context, node string) ([]Volume, error) {
	var out []Volume
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		items, err := safe.StateList[*block.VolumeStatus](ctx, tc.COSI, resource.NewMetadata(block.NamespaceName, block.VolumeStatusType, "", resource.VersionUndefined))
		if err != nil {
			return err
		}
		out = out[:0]
		for v := range items.All() {
			spec := v.TypedSpec()
			out = append(out, Volume{
				ID: v.Metadata().ID(), Ready: spec.Phase == block.VolumePhaseReady,
				Encryption: spec.EncryptionProvider.String(), Error: spec.ErrorMessage,
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unable to read the volumes of node %s: %w", node, err)
	}
	return out, nil
}
