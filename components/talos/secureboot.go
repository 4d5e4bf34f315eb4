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
		Slot        int        `yaml:"slot"`
		TPM         *tpmKey    `yaml:"tpm,omitempty"`
		NodeID      *nodeIDKey `yaml:"nodeID,omitempty"`
		LockToState bool       `yaml:"lockToState,omitempty"`
	}
	tpmKey struct {
		CheckSecureBootStatusOnEnroll bool `yaml:"checkSecurebootStatusOnEnroll"`
	}
	nodeIDKey struct{}
)

// Encryption is how a node's volumes are encrypted: none, with keys
// sealed to the TPM (Secure Boot), or with keys derived from the node's
// UUID (cluster.diskEncryption nodeID).
type Encryption string

// The encryptions.
const (
	EncryptionNone   Encryption = ""
	EncryptionTPM    Encryption = "tpm"
	EncryptionNodeID Encryption = "nodeID"
)

// encryption is the cluster's.
func (c ClusterSettings) encryption() Encryption {
	switch {
	case c.SecureBoot:
		return EncryptionTPM
	case c.DiskEncryption == string(EncryptionNodeID):
		return EncryptionNodeID
	}
	return EncryptionNone
}

// spec is the encryption spec of a volume (nil: none). A node-ID key of
// another volume than STATE is locked to STATE's salt (machinery
// config/types/block encryption.go, lockToState, refused for STATE
// itself at volume_config.go:211): that volume alone does not unlock.
func (e Encryption) spec(volume string) *encryptionSpec {
	switch e {
	case EncryptionTPM:
		return &encryptionSpec{Provider: "luks2", Keys: []encryptionKey{{Slot: 0, TPM: &tpmKey{CheckSecureBootStatusOnEnroll: true}}}}
	case EncryptionNodeID:
		return &encryptionSpec{Provider: "luks2", Keys: []encryptionKey{{Slot: 0, NodeID: &nodeIDKey{}, LockToState: volume != constants.StatePartitionLabel}}}
	}
	return nil
}

// EncryptionPatches are the patches of STATE (the machine config) and
// EPHEMERAL (/var: etcd's data, the kubelet's, the pods') encrypted as e
// says. None without encryption.
func EncryptionPatches(e Encryption) []string {
	if e == EncryptionNone {
		return nil
	}
	var out []string
	for _, volume := range []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel} {
		out = append(out, render(volumeEncryptionDoc{APIVersion: "v1alpha1", Kind: "VolumeConfig", Name: volume, Encryption: *e.spec(volume)}))
	}
	return out
}

// checkEncryption refuses an unknown diskEncryption, both keys at once,
// and either on a Talos release whose VolumeConfig cannot encrypt STATE
// (at gives a key's path).
func (c *ClusterSettings) checkEncryption(p *inputs.Problems, at func(string) string) {
	key := "secureBoot"
	switch {
	case c.DiskEncryption != "" && c.DiskEncryption != string(EncryptionNodeID):
		p.Add(at("diskEncryption"), "%q is not an encryption: nodeID (a key derived from each node's UUID), or leave it out", c.DiskEncryption)
		return
	case c.DiskEncryption != "" && c.SecureBoot:
		p.Add(at("diskEncryption"), "cannot go with secureBoot, which encrypts the volumes with TPM-sealed keys already: leave diskEncryption out")
		return
	case c.DiskEncryption != "":
		key = "diskEncryption"
	case !c.SecureBoot:
		return
	}
	if minor, ok := talosversion.Minor(c.TalosVersion); ok && minor < minSecureBootMinor {
		p.Add(at(key), "needs Talos v1.%d or newer, whose volume config encrypts STATE (cluster.talosVersion is %s): upgrade first, then turn it on",
			minSecureBootMinor, c.TalosVersion)
	}
}
