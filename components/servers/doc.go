// Package servers is the rented-server machine kind: servers installed
// from their provider's rescue system over SSH (the raw disk image written
// to their disk), rebooted into Talos, waited for, and closed by Talos's
// host firewall. The VPS platform (VpsCluster) and the Proxmox platform's
// servers entries both compose it; neither imports the other.
package servers
