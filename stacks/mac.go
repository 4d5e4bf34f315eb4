package stacks

import "net"

// validateMAC checks the configured MAC of the node at path node and its uniqueness. Go's
// net.ParseMAC reads several spellings of one address (52:54:00:aa:bb:01,
// 52-54-00-AA-BB-01, 5254.00aa.bb01); they are compared in one canonical
// form, so a duplicate in another spelling is caught, and normalizeMACs
// hands that form on. Proxmox VE itself takes only the colon form of a
// unicast address ('mac-addr' in pve-common's src/PVE/JSONSchema.pm).
func validateMAC(d *Diagnostics, node, mac string, macs map[string]string) {
	path := node + ".mac"
	if mac == "" {
		return // derived from the names
	}
	hw, err := net.ParseMAC(mac)
	switch {
	case err != nil || len(hw) != 6:
		d.errorf(path, "%q is not a MAC address like 52:54:00:12:34:56", mac)
	case hw[0]&1 == 1:
		d.errorf(path, "%s is a multicast address; a NIC needs a unicast one", hw)
	case isZeroMAC(hw):
		d.errorf(path, "%s is the all-zero address, which no NIC may have", hw)
	default:
		key := hw.String()
		if other, dup := macs[key]; dup {
			d.errorf(path, "%s is already the MAC of %s", hw, other)
		}
		macs[key] = node
	}
}

func isZeroMAC(hw net.HardwareAddr) bool {
	for _, b := range hw {
		if b != 0 {
			return false
		}
	}
	return true
}

// normalizeMACs rewrites every configured MAC in its canonical spelling,
// lower-case hex pairs joined by colons: the form the VM's NIC, the dnsmasq
// reservation and the duplicate checks all see. Runs after validation, so
// every MAC parses.
func normalizeMACs(cfg *Config) {
	for _, n := range cfg.Nodes.All() {
		if hw, err := net.ParseMAC(n.MAC); err == nil {
			n.MAC = hw.String()
		}
	}
}
