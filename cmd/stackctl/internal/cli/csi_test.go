package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// `stackctl csi-volume-rm` deletes, through the Proxmox API, one volume the
// CSI plugin left on the stack's datastore, and nothing else: another
// datastore's or a VM's own disk is refused by its name, a volume one of
// the cluster's VMs has attached is refused, and an unknown one is an
// error; each refusal leaves every volume where it was.
func TestCSIVolumeRm(t *testing.T) {
	t.Parallel()
	vms := map[int]*pveapitest.VM{
		120: {Node: "pve", Name: "worker-0", Config: map[string]string{"scsi2": "local-zfs:vm-9999-pvc-used,size=8G"}},
		300: {Node: "pve", Name: "other-worker", Config: map[string]string{"scsi1": "local-zfs:vm-9999-pvc-other,size=8G"}},
	}
	s := pveapitest.New(t, vms)
	s.AddDatastore("local-zfs", pveapitest.Datastore{Content: []string{"images"}})
	for _, v := range []string{"local-zfs:vm-9999-pvc-used", "local-zfs:vm-9999-pvc-left", "local-zfs:vm-120-disk-1", "local-zfs:vm-9999-pvc-other", "local-zfs:vm-9999-pvc-bound"} {
		s.PutFile("pve", v, 1<<30)
	}
	// The cluster: a bound claim whose pod is not running names pvc-bound.
	k8s := kubeapitest.Start(t)
	k8s.SetPersistentVolumes(kubeapitest.PersistentVolume{
		Name: "pvc-bound", Phase: "Bound", Driver: doctor.CSIDriver, VolumeHandle: "proxmox/pve/local-zfs/vm-9999-pvc-bound", Claim: "db/data-db-0",
	})
	outputsFile := filepath.Join(t.TempDir(), "outputs.json")
	writeOutputs := func(outs map[string]any) {
		b, err := json.Marshal(outs)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(outputsFile, b, 0o600))
	}
	writeOutputs(map[string]any{"kubeconfig": string(k8s.Kubeconfig())})
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "storage", func(m map[string]any) {
		m["proxmoxCsi"] = map[string]any{"datastore": "local-zfs"}
	})
	configFile := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(configFile, stackstest.ConfigJSON(t, src), 0o600))
	newAPI := func(*stacks.Config) (csiAPI, error) {
		return pveapi.New(s.URL, pveapitest.TokenID, pveapitest.TokenSecret, pveapi.Options{HTTPClient: s.Client()})
	}
	run := func(volume string) (int, string) {
		var out, errOut bytes.Buffer
		code := csiVolumeRmCmd(context.Background(), []string{"--stack", "homelab", "--config-json", configFile, "--outputs-json", outputsFile, "--volume", volume}, &out, &errOut, newAPI)
		return code, out.String() + errOut.String()
	}
	all := []string{"local-zfs:vm-120-disk-1", "local-zfs:vm-9999-pvc-bound", "local-zfs:vm-9999-pvc-left", "local-zfs:vm-9999-pvc-other", "local-zfs:vm-9999-pvc-used"}

	for volume, want := range map[string]string{
		"local-zfs:vm-120-disk-1":    "is not a volume of the CSI plugin on local-zfs",
		"local-lvm:vm-9999-pvc-left": "is not a volume of the CSI plugin on local-zfs",
		"local-zfs:vm-9999-pvc-used": "is attached to worker-0",
		// Issue 35, item C.10: another cluster's, and a bound claim's.
		"local-zfs:vm-9999-pvc-other": "is attached to VM 300 (other-worker), not of this cluster",
		"local-zfs:vm-9999-pvc-bound": "is named by PersistentVolume pvc-bound (claim db/data-db-0)",
		"local-zfs:vm-9999-pvc-none":  "no volume local-zfs:vm-9999-pvc-none",
	} {
		code, log := run(volume)
		assert.NotEqual(t, exitcode.OK, code, volume)
		assert.Contains(t, log, want, volume)
		assert.Equal(t, all, s.Volumes("pve"), "%s: nothing deleted", volume)
	}

	// A cluster whose API does not answer: nothing is deleted.
	writeOutputs(map[string]any{"kubeconfig": strings.Replace(string(k8s.Kubeconfig()), k8s.URL(), "https://127.0.0.1:1", 1)})
	code, log := run("local-zfs:vm-9999-pvc-left")
	assert.NotEqual(t, exitcode.OK, code)
	assert.Contains(t, log, "the cluster's PersistentVolumes could not be read")
	assert.Equal(t, all, s.Volumes("pve"), "nothing deleted")

	writeOutputs(map[string]any{"kubeconfig": string(k8s.Kubeconfig())})
	code, log = run("local-zfs:vm-9999-pvc-left")
	require.Equal(t, exitcode.OK, code, log)
	assert.Contains(t, log, "deleted local-zfs:vm-9999-pvc-left on pve")
	assert.Equal(t, []string{"local-zfs:vm-120-disk-1", "local-zfs:vm-9999-pvc-bound", "local-zfs:vm-9999-pvc-other", "local-zfs:vm-9999-pvc-used"}, s.Volumes("pve"))

	// A stack without a cluster (destroyed): no PersistentVolume of it.
	writeOutputs(map[string]any{})
	code, log = run("local-zfs:vm-9999-pvc-bound")
	require.Equal(t, exitcode.OK, code, log)
}
