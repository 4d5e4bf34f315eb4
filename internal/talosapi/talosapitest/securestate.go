package talosapitest

import (
	"context"
	"fmt"
	"slices"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config"
	cfgcfg "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// What Talos's volume manager says when a TPM-sealed key cannot be
// enrolled (talos v1.13.9 internal/pkg/encryption/keys/tpm2.go:57-64,
// wrapped by internal/app/machined/pkg/controllers/block/internal/volumes/
// encrypt.go:87), when a volume formatted without encryption is asked for
// it (encrypt.go:94) and when an encrypted one is asked for none
// (format.go:94).
const (
	errSecureBootOff   = "error formatting and encrypting volume: failed to enroll the TPM2 key, as SecureBoot is disabled (and checkSecurebootOnEnroll is enabled)"
	errNotLUKS         = "block dev type mismatch: xfs != luks"
	errLUKSNotExpected = "filesystem type mismatch: luks != xfs"
)

// systemVolumes are the volumes of Talos's own whose encryption a machine
// config sets (VolumeConfig documents).
var systemVolumes = []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel}

// installedVolumes is how a node started installed formatted its volumes:
// encrypted under Secure Boot, as its install config asked.
func installedVolumes(secureBoot bool) map[string]block.EncryptionProviderType {
	p := block.EncryptionProviderNone
	if secureBoot {
		p = block.EncryptionProviderLUKS2
	}
	out := map[string]block.EncryptionProviderType{}
	for _, id := range systemVolumes {
		out[id] = p
	}
	return out
}

// putVolumes writes the status of each volume formatted, ready (c.mu
// held, n.cosi made): a node's volumes as it boots.
func (n *Node) putVolumes() {
	for id, p := range n.formatted {
		st := block.VolumeStatusSpec{Type: block.VolumeTypePartition, Location: "/dev/sda", Phase: block.VolumePhaseReady, EncryptionProvider: p}
		r := block.NewVolumeStatus(block.NamespaceName, id)
		*r.TypedSpec() = st
		mustCOSI(putResource(context.Background(), n.cosi, r))
	}
}

// SetSecureBoot turns the node's firmware Secure Boot on or off, as its
// next boot sees it (the VM's EFI disk and keys): its SecurityState says
// so at once, and so do the volumes it provisions from then on.
func (n *Node) SetSecureBoot(on bool) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.spec.SecureBoot = on
	if n.cosi != nil {
		n.putSecurityState()
	}
}

// putSecurityState writes the node's SecurityState as machined's
// SecurityStateController does (talos v1.13.9 internal/app/machined/pkg/
// controllers/runtime/security_state.go:153): one resource, its
// secureBoot the firmware's state (c.mu held, n.cosi made).
func (n *Node) putSecurityState() {
	ctx := context.Background()
	r := runtime.NewSecurityStateSpec(runtime.NamespaceName)
	r.TypedSpec().SecureBoot = n.spec.SecureBoot
	r.TypedSpec().BootedWithUKI = n.spec.SecureBoot
	mustCOSI(putResource(ctx, n.cosi, r))
}

// putResource creates or replaces a resource of the fake's state.
func putResource(ctx context.Context, st state.State, r resource.Resource) error {
	_, err := st.Get(ctx, r.Metadata())
	switch {
	case err == nil:
		if err := st.Destroy(ctx, r.Metadata()); err != nil {
			return err
		}
	case !state.IsNotFoundError(err):
		return err
	}
	return st.Create(ctx, r)
}

// provisionEncryption does what Talos's volume manager does with the
// encryption of an applied config's STATE and EPHEMERAL, as far as the
// fake needs:
// a volume formatted before keeps its format (a change of encryption
// fails it, as Talos never re-encrypts); a new one is encrypted as asked,
// unless a TPM key that checks Secure Boot cannot be enrolled. formatted
// holds each volume's format across applies (by volume ID, "luks2" or
// "none"); the result is each volume's status (c.mu held).
func (n *Node) provisionEncryption(cfg config.Provider) {
	if cfg == nil {
		return
	}
	if n.formatted == nil {
		n.formatted = map[string]block.EncryptionProviderType{}
	}
	n.cosiState()
	ctx := context.Background()
	asked := map[string]cfgcfg.EncryptionConfig{}
	for _, name := range systemVolumes {
		if vc, ok := cfg.Volumes().ByName(name); ok {
			asked[name] = vc.Encryption()
		} else {
			asked[name] = nil
		}
	}
	ids := make([]string, 0, len(asked))
	for id := range asked {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		st := n.volumeStatus(id, asked[id])
		r := block.NewVolumeStatus(block.NamespaceName, id)
		*r.TypedSpec() = st
		mustCOSI(putResource(ctx, n.cosi, r))
	}
}

// volumeStatus is the status one volume reaches with the encryption asked
// (nil: none), c.mu held.
func (n *Node) volumeStatus(id string, enc cfgcfg.EncryptionConfig) block.VolumeStatusSpec {
	want := block.EncryptionProviderNone
	if enc != nil && enc.Provider() == block.EncryptionProviderLUKS2 {
		want = block.EncryptionProviderLUKS2
	}
	st := block.VolumeStatusSpec{Type: block.VolumeTypePartition, Location: "/dev/sda"}
	failed := func(msg string) block.VolumeStatusSpec {
		st.PreFailPhase, st.Phase, st.ErrorMessage = block.VolumePhaseProvisioned, block.VolumePhaseFailed, msg
		return st
	}
	if had, ok := n.formatted[id]; ok {
		switch {
		case had == block.EncryptionProviderNone && want != had:
			return failed(errNotLUKS)
		case had != block.EncryptionProviderNone && want == block.EncryptionProviderNone:
			return failed(errLUKSNotExpected)
		}
	} else {
		if want == block.EncryptionProviderLUKS2 && !n.spec.SecureBoot && checksSecureBoot(enc) {
			return failed(errSecureBootOff)
		}
		n.formatted[id] = want
	}
	st.Phase, st.EncryptionProvider = block.VolumePhaseReady, want
	if want == block.EncryptionProviderLUKS2 {
		slot := 0
		st.EncryptionSlot = &slot
	}
	return st
}

// checksSecureBoot reports whether one of the encryption's keys is a TPM
// key enrolled only under Secure Boot.
func checksSecureBoot(enc cfgcfg.EncryptionConfig) bool {
	for _, k := range enc.Keys() {
		if k.TPM() != nil && k.TPM().CheckSecurebootOnEnroll() {
			return true
		}
	}
	return false
}

// wipeVolumes forgets the node's volumes: a new machine's disks, or a
// reset that wiped them (c.mu held).
func (n *Node) wipeVolumes() {
	n.formatted = nil
	if n.cosi == nil {
		return
	}
	ctx := context.Background()
	old, err := n.cosi.List(ctx, block.NewVolumeStatus(block.NamespaceName, "").Metadata())
	mustCOSI(err)
	for _, r := range old.Items {
		mustCOSI(n.cosi.Destroy(ctx, r.Metadata()))
	}
}

// loadConfig loads an applied config; a stand-in that is not a machine
// config gives nil.
func loadConfig(data []byte) config.Provider {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil
	}
	return cfg
}

// VolumeEncryption returns each volume's encryption provider as the node
// reports it ("luks2", "none"), or its error message when it failed.
func (n *Node) VolumeEncryption() map[string]string {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	out := map[string]string{}
	if n.cosi == nil {
		return out
	}
	list, err := n.cosi.List(context.Background(), block.NewVolumeStatus(block.NamespaceName, "").Metadata())
	mustCOSI(err)
	for _, r := range list.Items {
		st, ok := r.(*block.VolumeStatus)
		if !ok {
			panic(fmt.Sprintf("talosapitest: a volume status of type %T", r))
		}
		if st.TypedSpec().Phase == block.VolumePhaseFailed {
			out[r.Metadata().ID()] = st.TypedSpec().ErrorMessage
			continue
		}
		out[r.Metadata().ID()] = st.TypedSpec().EncryptionProvider.String()
	}
	return out
}

// TPMVolumeConfigs are the documents a test's machine config carries to
// encrypt STATE and EPHEMERAL with a key sealed to the TPM and enrolled
// only under Secure Boot (machinery config/types/block VolumeConfig). The
// product's own are components/talos EncryptionPatches.
var TPMVolumeConfigs = tpmVolumeConfig(constants.StatePartitionLabel) + tpmVolumeConfig(constants.EphemeralPartitionLabel)

// tpmVolumeConfig is one volume's document of TPMVolumeConfigs.
func tpmVolumeConfig(volume string) string {
	return `---
apiVersion: v1alpha1
kind: VolumeConfig
name: ` + volume + `
encryption:
  provider: luks2
  keys:
    - slot: 0
      tpm:
        checkSecurebootStatusOnEnroll: true
`
}
