package docs

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A doc comment reads for a user of any language: no Go name at its
// start, no Go names of fields or constants, no nil.
func TestDocCommentsReadWithoutGo(t *testing.T) {
	t.Parallel()
	fields := map[string]string{"TokenID": "tokenId", "TokenSecret": "tokenSecret", "APITokenID": "apiTokenId", "Proxmox": "proxmox", "Protocol": "protocol"}
	consts := map[string]string{"DefaultCSIChartVersion": "0.3.5"}
	for _, c := range []struct{ text, goName, want string }{
		{"InstallerImage is the installer the nodes install from.", "InstallerImage", "The installer the nodes install from."},
		{"DiskDatastore holds the VM disks (default local-lvm).", "DiskDatastore", "Holds the VM disks (default local-lvm)."},
		{"APITokenID is user@realm!tokenname.", "APITokenID", "apiTokenId is user@realm!tokenname."},
		{"TokenID is a token of the user's, with TokenSecret.", "TokenID", "A token of the user's, with tokenSecret."},
		{"ChartVersion is the chart's version (default DefaultCSIChartVersion).", "ChartVersion", "The chart's version (default 0.3.5)."},
		{"DNSMasq writes the reservations (nil: none).", "DNSMasq", "Writes the reservations (none when left out)."},
		{"DataVolume says what the data disks (NodeSpec.DataDiskSize) become.", "DataVolume", "Says what the data disks (dataDiskSize) become."},
		{"CSI installs the Proxmox CSI plugin.", "CSI", "Installs the Proxmox CSI plugin."},
		{"All nodes.", "All", "All nodes."},
		{"KubeSpanEndpoints are the extra addresses (ip:port).", "KubeSpanEndpoints", "The extra addresses (ip:port)."},
		{"Protocol is tcp or udp.", "Protocol", "protocol is tcp or udp."},
		{"DataVolumeSettings say what a node's data disk becomes.", "DataVolumeSettings", "Says what a node's data disk becomes."},
		{"GitOps hands the cluster to Argo CD.", "GitOps", "Hands the cluster to Argo CD."},
		{"CABundle is PEM of the CA.", "CABundle", "PEM of the CA."},
	} {
		assert.Equal(t, c.want, neutral(c.text, c.goName, fields, consts), c.text)
	}
}
