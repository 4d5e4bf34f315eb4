package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

const (
	tRole  = "proxmoxve:Permission/role:Role"
	tUser  = "proxmoxve:Permission/user:User"
	tToken = "proxmoxve:User/token:Token"
	tACL   = "proxmoxve:index/acl:Acl"
	tNS    = "kubernetes:core/v1:Namespace"
)

func withCSI(t *testing.T, csi map[string]any) stacks.Source {
	t.Helper()
	return stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "storage", func(s map[string]any) {
		s["proxmoxCsi"] = csi
	})
}

func csiRelease(t *testing.T, e *componentstest.Engine) componentstest.Registered {
	t.Helper()
	for _, r := range e.ByType(componentstest.Release) {
		if r.Inputs["name"].StringValue() == "proxmox-csi-plugin" {
			return r
		}
	}
	t.Fatal("no proxmox-csi-plugin release")
	return componentstest.Registered{}
}

// A stack with storage.proxmoxCsi: the plugin's token has the five
// privileges the plugin documents, granted on the datastore and the
// cluster's own VMs only (not "/"); the chart gets the token (secret), the
// region and one StorageClass on the datastore that keeps its volumes
// (Retain), in a namespace that allows the privileged node plugin; every
// node carries the topology labels and the provider id the plugin finds
// its VM by.
func TestTheProxmoxCSIPlugin(t *testing.T) {
	t.Parallel()
	src := withCSI(t, map[string]any{"datastore": "local-zfs"})
	e, _, _, err := programtest.Run(t, src, "proxmox-homelab", program.Options{})
	require.NoError(t, err)
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err())

	role := e.One(t, tRole)
	var privs []string
	for _, p := range role.Inputs["privileges"].ArrayValue() {
		privs = append(privs, p.StringValue())
	}
	assert.ElementsMatch(t, []string{"VM.Audit", "VM.Config.Disk", "Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.Audit"}, privs)
	assert.Equal(t, "homelab-csi@pve", e.One(t, tUser).Inputs["userId"].StringValue())
	var paths []string
	for _, a := range e.ByType(tACL) {
		path := a.Inputs["path"].StringValue()
		paths = append(paths, path)
		assert.False(t, a.Inputs["propagate"].BoolValue(), "no ACL reaches further than its path")
		if strings.HasPrefix(path, "/vms/") {
			// Proxmox drops a VM's ACLs with the VM.
			assert.Contains(t, a.DeletedWith, "VirtualMachine::homelab-vm-", "%s goes with its VM", path)
			require.Len(t, a.ReplaceWith, 1, "%s is made again for a new VM", path)
			assert.Equal(t, a.DeletedWith, a.ReplaceWith[0])
		}
	}
	want := []string{"/storage/local-zfs"}
	for _, ref := range cfg.Nodes.Refs() {
		want = append(want, fmt.Sprintf("/vms/%d", ref.VMID))
	}
	assert.ElementsMatch(t, want, paths)
	token := e.One(t, tToken)
	assert.False(t, token.Inputs["privilegesSeparation"].BoolValue(), "the token has the user's privileges, no more")

	ns := e.One(t, tNS)
	assert.Equal(t, "privileged", ns.Inputs["metadata"].ObjectValue()["labels"].ObjectValue()["pod-security.kubernetes.io/enforce"].StringValue())
	rel := csiRelease(t, e)
	assert.Equal(t, "oci://ghcr.io/sergelogvinov/charts/proxmox-csi-plugin", rel.Inputs["chart"].StringValue())
	values := rel.Inputs["values"]
	assert.True(t, values.ContainsSecrets(), "the token's secret stays secret")
	text := fmt.Sprint(values)
	for _, s := range []string{"local-zfs", "Retain", "ext4", "https://192.168.122.70:8006/api2/json", "proxmox"} {
		assert.Contains(t, text, s)
	}
	assert.True(t, e.After(rel, ns))
	assert.True(t, e.After(rel, e.Named(t, componentstest.Release, "homelab-cilium")), "after the network")

	for _, a := range e.ByType(componentstest.Apply) {
		patches := fmt.Sprint(a.Inputs["configPatches"])
		assert.Contains(t, patches, "topology.kubernetes.io/zone", a.Name)
		assert.Contains(t, patches, "provider-id: proxmox://proxmox/", a.Name)
	}
}

// A token of the user's is used as it is (no role, user, ACL or token is
// made) and stays secret; without the section, nothing of the plugin
// exists; on a VPS stack, or with a bad datastore, the section is refused
// by key before anything is registered.
func TestTheProxmoxCSIPluginsVariants(t *testing.T) {
	t.Parallel()
	src := proxmoxExampleWith(t, `
  talos-cluster:storage:
    proxmoxCsi:
      datastore: local-zfs
      tokenId: ops@pve!csi
`, map[string]string{"storage.proxmoxCsi.tokenSecret": "csi-t0ken-s3cret"})
	e, _, _, err := programtest.Run(t, src, "proxmox-homelab", program.Options{})
	require.NoError(t, err)
	for _, typ := range []string{tRole, tUser, tToken, tACL} {
		assert.Empty(t, e.ByType(typ), typ)
	}
	rel := csiRelease(t, e)
	assert.Contains(t, fmt.Sprint(rel.Inputs["values"]), "ops@pve!csi")
	for _, r := range e.All() {
		for name, v := range r.Inputs {
			if !v.ContainsSecrets() {
				assert.NotContains(t, fmt.Sprint(v), "csi-t0ken-s3cret", "%s.%s", r.Name, name)
			}
		}
	}

	e, _, _, err = programtest.Run(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox-homelab", program.Options{})
	require.NoError(t, err)
	for _, typ := range []string{tRole, tUser, tToken, tACL, tNS} {
		assert.Empty(t, e.ByType(typ), typ)
	}
	for _, a := range e.ByType(componentstest.Apply) {
		assert.NotContains(t, fmt.Sprint(a.Inputs["configPatches"]), "provider-id")
	}

	_, d := program.Validate(withCSI(t, map[string]any{"datastore": "local zfs"}))
	require.Error(t, d.Err())
	assert.Contains(t, d.Err().Error(), `storage.proxmoxCsi.datastore: "local zfs" is not a datastore name`)
	_, d = program.Validate(withCSI(t, map[string]any{"datastore": "local-zfs", "tokenId": "ops@pve!csi"}))
	assert.Contains(t, fmt.Sprint(d.Err()), "storage.proxmoxCsi.tokenId: and tokenSecret go together")

	vps := stackstest.EditSection(t, stackstest.Example(t, stackstest.VPSExample), "storage", func(s map[string]any) {
		s["proxmoxCsi"] = map[string]any{"datastore": "local-zfs"}
	})
	_, d = program.Validate(vps)
	assert.Contains(t, fmt.Sprint(d.Err()), "storage.proxmoxCsi: is only valid for platform proxmox")
}
