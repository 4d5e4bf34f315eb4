// Talos Linux Kubernetes clusters on Proxmox VE VMs, rescue-installed VPS machines or local Docker containers.
package talosanywhere
