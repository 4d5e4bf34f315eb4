package doctor

import (
	"fmt"
	"strconv"
	"strings"
)

// minSecureBootPVE is the first Proxmox VE whose VMs take a TPM state
// disk (tpmstate0, run by swtpm): qemu-server 7.0-15 ("fix #3075: add TPM
// v1.2 and v2.0 support via swtpm", its debian/changelog), shipped with
// Proxmox VE 7.1. qemu-server depends on swtpm and on the OVMF firmware
// from then on (debian/control), so a host of that version has both.
var minSecureBootPVE = [2]int{7, 1}

// checkSecureBootHost checks, for cluster.secureBoot, that the host's
// Proxmox VE gives VMs a TPM; their EFI and TPM state disks go on the
// disk datastore, checked with the disks.
func checkSecureBootHost(s section, version, diskDatastore string) Result {
	major, minor := pveVersion(version)
	if major < minSecureBootPVE[0] || (major == minSecureBootPVE[0] && minor < minSecureBootPVE[1]) {
		return Result{Fail, "secboot", fmt.Sprintf("cluster.secureBoot: %s runs Proxmox VE %s, whose VMs have no TPM (tpmstate0 came with %d.%d): upgrade the host, or turn cluster.secureBoot off",
			s.Endpoint, version, minSecureBootPVE[0], minSecureBootPVE[1])}
	}
	return Result{OK, "secboot", fmt.Sprintf("Proxmox VE %s gives each VM OVMF and a TPM 2.0 (swtpm); their EFI and TPM state disks go on datastore %q", version, diskDatastore)}
}

// pveVersion reads the major and minor of a Proxmox VE version ("8.4.1");
// what it cannot read is 0.
func pveVersion(version string) (major, minor int) {
	parts := strings.SplitN(version, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}
