package tests

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// These tests replay, against the fake Proxmox API, what the proxmoxve
// provider does with the ISO downloads the program registers (see
// downloadFile for the provider's logic): one `up`, `destroy` or second
// stack at a time, each fed with the inputs of a fresh program run under
// mocks, as the engine would.

// isoDownloads runs the program as a stack under mocks and returns the
// inputs of its ISO downloads.
func isoDownloads(t *testing.T, src stacks.Source, stack string) []downloadInputs {
	t.Helper()
	e, _, _, err := programtest.Run(t, src, stack, program.Options{})
	require.NoError(t, err)
	var out []downloadInputs
	for _, r := range e.ByType(componentstest.Download) {
		out = append(out, inputsOf(r))
	}
	require.NotEmpty(t, out)
	return out
}

// isoUp is the provider creating every download of a stack's `up`; the
// factory serves the ISOs.
func isoUp(t *testing.T, fake *pveapitest.Server, stack string, downloads []downloadInputs) []string {
	t.Helper()
	var ids []string
	for _, d := range downloads {
		fake.Serve(d.URL, 104857600)
		id, err := downloadFile{fake}.Create(d)
		require.NoError(t, err, "up of %s: ISO on %s", stack, d.Node)
		ids = append(ids, id)
	}
	return ids
}

// isoDestroy is the engine's destroy: the provider deletes each download
// unless it is retained.
func isoDestroy(t *testing.T, fake *pveapitest.Server, downloads []downloadInputs, ids []string) {
	t.Helper()
	for i, d := range downloads {
		if !d.RetainOnDelete {
			require.NoError(t, downloadFile{fake}.Delete(d, ids[i]))
		}
	}
}

func TestProxmoxISOKeptByDestroyThenUpAgain(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(m map[string]any) { m["keepIso"] = true })
	fake := pveapitest.New(t, nil)
	const stack = "proxmox-homelab"

	first := isoDownloads(t, src, stack)
	ids := isoUp(t, fake, stack, first)
	isoDestroy(t, fake, first, ids)
	assert.Equal(t, ids, fake.Volumes("pve"), "keepIso: the ISO stays, no longer managed")

	// The next up registers the same file and meets the kept one.
	again := isoDownloads(t, src, stack)
	assert.Equal(t, first, again)
	assert.Equal(t, ids, isoUp(t, fake, stack, again))
	assert.Equal(t, ids, fake.Volumes("pve"))
	assert.Equal(t, 3, fake.Downloads("pve"), "first up; second up refused by Proxmox, then downloaded again over the kept file")
}

func TestProxmoxISOTwoStacksOnOneHostDestroyOne(t *testing.T) {
	t.Parallel()
	// Two stacks from the same example: same cluster name, Talos version,
	// extensions and Proxmox node.
	src := stackstest.Example(t, stackstest.ProxmoxExample)
	fake := pveapitest.New(t, nil)

	homelab := isoDownloads(t, src, "proxmox-homelab")
	staging := isoDownloads(t, src, "proxmox-staging")
	homelabIDs := isoUp(t, fake, "proxmox-homelab", homelab)
	stagingIDs := isoUp(t, fake, "proxmox-staging", staging)

	isoDestroy(t, fake, homelab, homelabIDs)
	left := fake.Volumes("pve")
	for i, id := range stagingIDs {
		assert.Contains(t, left, id, "the other stack's VMs still boot from their ISO")
		assert.NoError(t, downloadFile{fake}.read(t.Context(), staging[i], id), "and the provider still finds it on refresh")
	}
	for _, id := range homelabIDs {
		if !slices.Contains(stagingIDs, id) {
			assert.NotContains(t, left, id, "the destroyed stack's ISO is gone")
		}
	}
}
