package talosapitest

import (
	"fmt"
	"maps"

	blockapi "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// Disk is one of a machine's disks, as Talos's disk selectors see it.
type Disk struct {
	DevPath string
	SizeGiB int
	// System is the disk Talos is installed on; CDROM a read-only CD-ROM
	// (the ISO).
	System, CDROM bool
}

// userVolumeMountRoot is where Talos mounts user volumes.
const userVolumeMountRoot = "/var/mnt/"

// provisionVolumes does what Talos's volume controller does with the user
// volumes of an applied config, as far as the fake needs: each volume's
// selector, evaluated with Talos's own CEL environment, picks the first
// matching disk that no other volume took, which is then mounted at
// /var/mnt/<name>; a volume no disk matches waits ("").
func provisionVolumes(config []byte, disks []Disk) (map[string]string, error) {
	cfg, err := configloader.NewFromBytes(config)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	taken := map[string]bool{}
	for _, v := range cfg.UserVolumeConfigs() {
		mount := userVolumeMountRoot + v.Name()
		out[mount] = ""
		match := v.Provisioning().DiskSelector()
		expr, ok := match.Get()
		if !ok {
			continue
		}
		for _, d := range disks {
			if taken[d.DevPath] {
				continue
			}
			spec := &blockapi.DiskSpec{DevPath: d.DevPath, Size: uint64(d.SizeGiB) << 30, Cdrom: d.CDROM, Readonly: d.CDROM} //nolint:gosec // a test disk's size in GiB, small and positive
			picked, err := expr.EvalBool(celenv.DiskLocator(), map[string]any{"disk": spec, "system_disk": d.System})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name(), err)
			}
			if picked {
				out[mount], taken[d.DevPath] = d.DevPath, true
				break
			}
		}
	}
	return out, nil
}

// Mounts are the user volumes of the config last applied to the node, by
// mount path: the disk each is on ("" while no disk matches its selector).
func (n *Node) Mounts() map[string]string {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return maps.Clone(n.mounts)
}
