package talos

import (
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/talosversion"
)

// minSecureBootMinor is the first Talos 1.x release whose VolumeConfig
// takes STATE's encryption (machinery v1.10.0 config/types/block
// volume_config.go:155 allows EPHEMERAL and IMAGECACHE only, without an
// encryption spec; v1.11.0 volume_config.go:68 adds it).
const minSecureBootMinor = 11

// The encryption of a Secure Boot node's volumes (machinery
// config/types/block encryption.go): LUKS2 with one key, made on the node
// and sealed to its TPM, bound to PCR 7 (the Secure Boot state, Talos's
// default), and enrolled only while Secure Boot is on: a disk moved to
// another machine, or booted without the signed image, does not unlock.
type (
	volumeEncryptionDoc struct {
		APIVersion string         `yaml:"apiVersion"`
		Kind       string         `yaml:"kind"`
		Name       string         `yaml:"name"`
		Encryption encryptionSpec `yaml:"encryption"`
	}
	encryptionSpec struct {
		Provider string          `yaml:"provider"`
		Keys     []encryptionKey `yaml:"keys"`
	}
	encryptionKey struct {
		Slot int     `yaml:"slot"`
		TPM  *tpmKey `yaml:"tpm"`
	}
	tpmKey struct {
		CheckSecureBootStatusOnEnroll bool `yaml:"checkSecurebootStatusOnEnroll"`
	}
)

// tpmEncryption is the encryption spec of every volume of a Secure Boot
// node.
func tpmEncryption() *encryptionSpec {
	return &encryptionSpec{Provider: "luks2", Keys: []encryptionKey{{Slot: 0, TPM: &tpmKey{CheckSecureBootStatusOnEnroll: true}}}}
}

// SecureBootPatches are the patches of a node that boots Talos's signed
// image: STATE (the machine config) and EPHEMERAL (/var: etcd's data, the
// kubelet's, the pods') encrypted with a TPM-sealed key. None when off.
func SecureBootPatches(on bool) []string {
	if !on {
		return nil
	}
	var out []string
	for _, volume := range []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel} {
		out = append(out, render(volumeEncryptionDoc{APIVersion: "v1alpha1", Kind: "VolumeConfig", Name: volume, Encryption: *tpmEncryption()}))
	}
	return out
}

// checkSecureBoot refuses Secure Boot on a Talos release whose
// VolumeConfig cannot encrypt STATE (at is the key's path).
func (c *ClusterSettings) checkSecureBoot(p *inputs.Problems, at string) {
	if !c.SecureBoot {
		return
	}
	if minor, ok := talosversion.Minor(c.TalosVersion); ok && minor < minSecureBootMinor {
		p.Add(at, "needs Talos v1.%d or newer, whose volume config encrypts STATE with a TPM-sealed key (cluster.talosVersion is %s): upgrade first, then turn it on",
			minSecureBootMinor, c.TalosVersion)
	}
}
