package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// SecureBootVolumes are the volumes a Secure Boot node encrypts with a
// TPM-sealed key: STATE (its machine config) and EPHEMERAL (/var).
var SecureBootVolumes = []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel}

// errNoSecureBoot and errFormatted end the wait at once: a node whose
// firmware booted without Secure Boot stays so until it boots again, and
// Talos never retries a volume formatted with another encryption than its
// config asks (talos v1.13.9 internal/app/machined/pkg/controllers/block/
// internal/volumes/encrypt.go:94 and format.go:94 return untagged errors:
// not Retryable).
var (
	errNoSecureBoot = errors.New("it booted without Secure Boot: its firmware does not enforce it, so no TPM-sealed key can be enrolled; its VM needs OVMF with an EFI disk whose keys are not pre-enrolled (setup mode, which the Talos ISO leaves by enrolling its own keys) and the Secure Boot ISO")
	errFormatted    = errors.New("it was formatted before with another encryption, and Talos never re-encrypts a volume: only a new machine (new disks) takes the new encryption")
)

// CheckSecureBoot waits until the node reports Secure Boot enforced and
// each of volumes ready and encrypted with LUKS2: a Secure Boot node after
// an upgrade or a config apply. A node without Secure Boot, or a volume
// that can never be encrypted, fails it at once, naming the volume and
// Talos's message; a volume still on its way is waited for.
func (o Ops) CheckSecureBoot(ctx context.Context, n Node, volumes []string) error {
	t := o.Timing.WithDefaults()
	var fatal error
	err := o.poll(ctx, t, fmt.Sprintf("%s to report Secure Boot and its encrypted volumes", n), func() error {
		on, err := o.API.SecureBoot(ctx, n.IP)
		if err != nil {
			return err
		}
		if !on {
			fatal = errNoSecureBoot
			return nil
		}
		vols, err := o.API.Volumes(ctx, n.IP)
		if err != nil {
			return err
		}
		var waiting []string
		for _, id := range volumes {
			i := slices.IndexFunc(vols, func(v talosapi.Volume) bool { return v.ID == id })
			switch {
			case i < 0:
				waiting = append(waiting, id+": not reported yet")
			case strings.Contains(vols[i].Error, "mismatch"):
				fatal = fmt.Errorf("volume %s (%s): %w", id, vols[i].Error, errFormatted)
				return nil
			case vols[i].Error != "":
				waiting = append(waiting, fmt.Sprintf("%s: %s", id, vols[i].Error))
			case !vols[i].Ready:
				waiting = append(waiting, id+": not ready")
			case vols[i].Encryption != "luks2":
				// Ready as it is: it stays so.
				fatal = fmt.Errorf("volume %s is ready unencrypted (%s): its config asks for no TPM-sealed key", id, vols[i].Encryption)
				return nil
			}
		}
		if len(waiting) > 0 {
			return errors.New(strings.Join(waiting, "; "))
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case fatal != nil:
		return fmt.Errorf("unable to check the Secure Boot of %s: %w", n, fatal)
	}
	o.logf("%s runs under Secure Boot, %s encrypted with TPM-sealed keys", n, strings.Join(volumes, " and "))
	return nil
}
