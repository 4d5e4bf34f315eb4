package proxmox

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// VMType is the Proxmox provider's VM resource type: the program reads the
// last shape of the cluster's VMs from the stack's state by it.
const VMType = "proxmoxve:VM/virtualMachine:VirtualMachine"

// PreviousVM is a node's VM as the last `up` left it (its resource's
// outputs in the stack's state): what checkResizes compares this run with.
type PreviousVM struct {
	// Disks are the disks' sizes in GiB by interface (scsi0, scsi1).
	Disks map[string]int
	// Cores, Memory (MiB), CPUType and BIOS as the VM had them.
	Cores, Memory int
	CPUType, BIOS string
	// Agent is whether the guest agent was on.
	Agent bool
}

// checkResizes refuses, for each node the last run knew, a boot disk that
// shrinks, and a disk that grows in the same run as a change the provider
// applies only with a reboot: that resize would be recorded but not made
// (docs/decisions/0004-upstream-behaviours.md#a-disk-cannot-grow-with-a-reboot-only-change).
func (a *ClusterArgs) checkResizes(p *inputs.Problems) {
	for i, n := range a.Nodes {
		agent := hasGuestAgent(a.schematicOf(n))
		was, ok := a.PreviousVMs[n.Name]
		if !ok {
			continue
		}
		at := fmt.Sprintf("nodes[%d].", i)
		if had := was.Disks[bootDisk]; had > 0 && n.DiskSize < had {
			p.Add(at+"diskSize", "shrinks the boot disk of %s from %d to %d GiB: a VM's disk cannot shrink; keep %d GiB or more", n.Name, had, n.DiskSize, had)
			continue
		}
		var grows []string
		if had := was.Disks[bootDisk]; had > 0 && n.DiskSize > had {
			grows = append(grows, "diskSize")
		}
		if had := was.Disks[dataDisk]; had > 0 && n.DataDiskSize > had {
			grows = append(grows, "dataDiskSize")
		}
		var reboots []string
		for _, c := range []struct {
			name    string
			changed bool
		}{
			{"cores", was.Cores != 0 && was.Cores != n.Cores},
			{"memory", was.Memory != 0 && was.Memory != n.Memory},
			{"proxmox.cpuType", was.CPUType != "" && was.CPUType != a.settingsOf(n.Host).CPUType},
			{"the guest agent (the schematic's extensions)", was.Agent != agent},
		} {
			if c.changed {
				reboots = append(reboots, c.name)
			}
		}
		if len(grows) == 0 || len(reboots) == 0 {
			continue
		}
		for _, key := range grows {
			p.Add(at+key, "grows a disk of %s in the same run as a change of %s, which its VM takes only at a reboot: the Proxmox provider (bpg v0.95 in proxmoxve 7.13) then skips the resize and still records the new size; grow the disk in one `up` and make the other change in the next",
				n.Name, strings.Join(reboots, ", "))
		}
	}
}

// PreviousVMFrom reads a VM resource's outputs as the state holds them
// (what bpg read back from Proxmox): the VM's name, its disks' sizes and
// what it takes only at a reboot; false without a name.
func PreviousVMFrom(outputs map[string]any) (string, PreviousVM, bool) {
	name, _ := outputs["name"].(string)
	if name == "" {
		return "", PreviousVM{}, false
	}
	vm := PreviousVM{Disks: map[string]int{}}
	disks, _ := outputs["disks"].([]any)
	for _, d := range disks {
		dm, _ := d.(map[string]any)
		if iface, ok := dm["interface"].(string); ok {
			vm.Disks[iface] = number(dm["size"])
		}
	}
	cpu, _ := outputs["cpu"].(map[string]any)
	vm.Cores = number(cpu["cores"])
	vm.CPUType, _ = cpu["type"].(string)
	memory, _ := outputs["memory"].(map[string]any)
	vm.Memory = number(memory["dedicated"])
	vm.BIOS, _ = outputs["bios"].(string)
	agent, _ := outputs["agent"].(map[string]any)
	vm.Agent, _ = agent["enabled"].(bool)
	return name, vm, true
}

// number is a state value's integer (a JSON number, or its text; 0 when
// neither).
func number(v any) int {
	if f, ok := v.(float64); ok {
		return int(f)
	}
	n, err := strconv.Atoi(fmt.Sprint(v))
	if err != nil {
		return 0
	}
	return n
}
