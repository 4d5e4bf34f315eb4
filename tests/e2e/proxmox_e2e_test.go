//go:build e2e

// Package e2e runs the project's Pulumi program as a user runs it: make's
// stack targets in a copy of this repository, the real pulumi CLI and
// plugins (../shared/harness), against the project's fakes of what is not
// here (Proxmox VE, the Image Factory, Talos machines) and the real
// kube-apiserver and charts. make e2e runs it in a network namespace.
package e2e

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubesim"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest/realetcd"
	"github.com/fluodata/talos-pulumi/internal/testkit/charttest"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
	"github.com/fluodata/talos-pulumi/internal/testkit/factorytest"
)

// stack is the e2e stack's name; its file is testdata/Pulumi.e2e.yaml.
const stack = "e2e"

// The addresses of testdata/Pulumi.e2e.yaml.
const (
	pveAddr = "10.77.0.2:8006"
	vip     = "10.77.0.5"
)

// machine is one node of the e2e stack: its VM and its Talos machine.
type machine struct {
	name string
	ip   string
	vmID int
	cp   bool
}

var machines = []machine{
	{"cp-0", "10.77.0.10", 110, true}, {"cp-1", "10.77.0.11", 111, true}, {"cp-2", "10.77.0.12", 112, true},
	{"worker-0", "10.77.0.20", 120, false}, {"pool-0", "10.77.0.21", 121, false}, {"pool-1", "10.77.0.22", 122, false},
}

// schematicID is the id the Image Factory gives the schematic of those
// extensions and kernel arguments.
func schematicID(t *testing.T, extensions, kernelArgs []string) string {
	t.Helper()
	doc, err := image.SchematicYAML(extensions, kernelArgs)
	require.NoError(t, err)
	id, err := factorytest.SchematicID([]byte(doc))
	require.NoError(t, err)
	return id
}

// world is what the stack runs against.
type world struct {
	t    *testing.T
	ctx  context.Context
	repo string // the copy of this repository make runs in
	// identityFile is the age identity the backups are encrypted to.
	identityFile string
	pve          *pveapitest.Server
	nodes        *talosapitest.Cluster
	kube         *e2etest.Kube
	// stack is the stack's name; the const stack when empty.
	stack string
}

// stackName is the stack the world's make and pulumi run on.
func (w *world) stackName() string {
	if w.stack == "" {
		return stack
	}
	return w.stack
}

// TestE2EProxmoxExampleLivesItsLife runs the Proxmox example's program
// through make, as the README has a user run it, with the real CLI and
// plugins: the proxmoxve plugin (bpg v0.95) against the Proxmox API fake
// at the stack's endpoint; the talos plugin against the Image Factory fake
// and the Talos fake's machines at the VMs' addresses (booted from the ISO:
// maintenance mode), a real etcd (package realetcd) holding what their etcd
// holds; the kubernetes plugin and Helm against a real kube-apiserver at the
// VIP and each control plane's address, with the real Cilium, approver and
// Proxmox CSI charts (the last from the OCI registry side of the chart
// fake); kubesim plays the kubelets and controllers.
//
// It walks: first up; a preview with no change and no warning; a refresh
// (the CSI grants kept); a Talos upgrade; a lower version (refused); two
// control planes removed (refused); a pool lowered by one node; a backup; etcd's
// quorum lost and the control planes recovered from the backup (make
// restore CONTROL_PLANES=1); everything destroyed and restored from the
// backup into new VMs; a preview with no change after each; destroy.
func TestE2EProxmoxExampleLivesItsLife(t *testing.T) {
	w := newWorld(t)

	start := time.Now()
	out := w.make("up", "YES=1")
	t.Logf("first up: %s", time.Since(start).Round(time.Second))
	assert.NotContains(t, out, "unable to read the stack's last outputs", "the refusals that compare with the last run are not skipped")
	assert.True(t, w.nodes.Bootstrapped(), "the first control plane is bootstrapped")
	for _, m := range machines {
		vm := w.pve.VM(m.vmID)
		require.NotNil(t, vm, "VM %d exists", m.vmID)
		assert.True(t, vm.Running, "VM %d runs", m.vmID)
		assert.False(t, w.nodes.Node(m.ip).InMaintenance(), "%s installed", m.name)
		assert.NotContains(t, vm.Config["ide2"], "iso/", "%s: the ISO ejected", m.name)
	}
	// The pool's own schematic (its kernel arguments): registered through
	// the real talos provider with the factory fake, which parses it as
	// strictly as image-factory; its ISO downloaded beside the cluster's.
	var isos []string
	for _, v := range w.pve.Volumes("pve") {
		if strings.HasSuffix(v, ".iso") {
			isos = append(isos, v)
		}
	}
	assert.Len(t, isos, 2, "the cluster's ISO and the pool's: %v", isos)
	roles, users, tokens, acls := w.pve.Access()
	t.Logf("Proxmox access after the first up: roles %v, users %v, tokens %v, ACLs %v", roles, users, tokens, acls)
	assert.Len(t, users, 1, "the CSI plugin's user")
	assert.Len(t, tokens, 1, "and its token")
	assert.NotEmpty(t, acls, "its ACLs")
	w.noChange("after the first up")

	// A refresh reads every resource back from the real providers: it
	// finds what up made, and the next up changes nothing (bpg v0.95's
	// user reads its ACLs back, which must not revoke them).
	w.make("refresh", "YES=1")
	w.noChange("after a refresh")
	_, _, _, again := w.pve.Access()
	assert.Equal(t, acls, again, "the grants survive the refresh")

	// A Talos upgrade rolls through the nodes one at a time, the control
	// planes first.
	w.edit("v1.13.9 # e2e: talosVersion", "v1.13.10 # e2e: talosVersion")
	start = time.Now()
	w.make("up", "YES=1")
	t.Logf("Talos upgrade: %s", time.Since(start).Round(time.Second))
	for _, m := range machines {
		assert.Equal(t, "v1.13.10", w.nodes.Node(m.ip).Version(), "%s upgraded", m.name)
	}
	ups := w.nodes.Events("Upgrade")
	require.Len(t, ups, len(machines), "one upgrade per node")
	for i, m := range machines[:3] {
		assert.Equal(t, m.ip, ups[i].Node, "the control planes first, in order")
	}
	// Each node moves to its own schematic's installer: the pool's nodes
	// to the one with its kernel arguments.
	exts := []string{"siderolabs/qemu-guest-agent", "siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}
	clusterID, poolID := schematicID(t, exts, nil), schematicID(t, exts, []string{"console=ttyS0"})
	for _, up := range ups {
		want := clusterID
		if strings.HasPrefix(w.nodes.Node(up.Node).Hostname(), "pool-") {
			want = poolID
		}
		assert.Contains(t, up.Args, "/"+want+":v1.13.10", "%s upgrades with its schematic's installer", up.Node)
	}
	w.noChange("after the Talos upgrade")

	// A lower version is refused before anything runs.
	w.edit("v1.13.10 # e2e: talosVersion", "v1.13.9 # e2e: talosVersion")
	out = w.upFails("YES=1")
	assert.Contains(t, out, "cluster.talosVersion", "the refusal names the key")
	assert.Len(t, w.nodes.Events("Upgrade"), len(machines), "no node touched")
	w.edit("v1.13.9 # e2e: talosVersion", "v1.13.10 # e2e: talosVersion")

	// Two control planes removed in one up: refused.
	w.edit("\n      - {name: cp-1,", "\n      # - {name: cp-1,")
	w.edit("\n      - {name: cp-2,", "\n      # - {name: cp-2,")
	out = w.upFails("YES=1")
	assert.Contains(t, out, "removes 2 control planes in one `up` (cp-1, cp-2)")
	for _, m := range machines {
		assert.NotNil(t, w.pve.VM(m.vmID), "VM %d kept", m.vmID)
	}
	w.edit("\n      # - {name: cp-1,", "\n      - {name: cp-1,")
	w.edit("\n      # - {name: cp-2,", "\n      - {name: cp-2,")
	w.noChange("after the refusals")

	// A pool's count lowered: its highest-numbered node leaves the
	// cluster as a removed worker does, and its VM goes.
	w.edit("{name: pool, count: 2,", "{name: pool, count: 1,")
	start = time.Now()
	w.make("up", "YES=1")
	t.Logf("pool node removed: %s", time.Since(start).Round(time.Second))
	assert.Nil(t, w.pve.VM(122), "pool-1's VM is gone")
	assert.NotNil(t, w.pve.VM(121), "pool-0's VM is kept")
	_, _, _, acls = w.pve.Access()
	assert.NotContains(t, acls, pveapitest.ACL{Path: "/vms/122", Role: "homelab-csi", User: "homelab-csi@pve"}, "the CSI user's grant on its VM goes with it")
	assert.Contains(t, acls, pveapitest.ACL{Path: "/vms/121", Role: "homelab-csi", User: "homelab-csi@pve"})
	w.noChange("after the pool node left")

	// A backup, of a cluster with data in its etcd.
	w.nodes.SetEtcdKeys(map[string]string{"/registry/configmaps/default/e2e": "kept"})
	assert.Contains(t, w.make("backup"), "etcd's hash checks", "a real etcd snapshot")
	assert.Contains(t, w.make("backups"), "v1.13.10", "the backup is listed with its Talos version")

	// etcd's quorum lost (two of three members down): the control planes
	// alone are reset and recovered from the backup, the workers and the
	// state kept.
	w.nodes.SetEtcdKeys(map[string]string{"/registry/configmaps/default/e2e": "changed after the backup"})
	for _, ip := range []string{"10.77.0.11", "10.77.0.12"} {
		w.nodes.Node(ip).SetEtcdHealthy(false)
	}
	workerBoots := w.nodes.Node("10.77.0.20").Boots()
	start = time.Now()
	w.make("restore", "IDENTITY="+w.identityFile, "CONTROL_PLANES=1")
	t.Logf("control planes recovered: %s", time.Since(start).Round(time.Second))
	assert.Equal(t, "kept", w.nodes.EtcdKeys()["/registry/configmaps/default/e2e"], "etcd recovered from the backup's snapshot")
	assert.Len(t, w.nodes.Members(), 3, "every control plane back in etcd")
	assert.Equal(t, workerBoots, w.nodes.Node("10.77.0.20").Boots(), "the worker untouched")
	for _, m := range machines[:5] {
		assert.NotNil(t, w.pve.VM(m.vmID), "VM %d kept", m.vmID)
	}
	w.noChange("after the control planes' recovery")

	// Everything lost: destroyed, then restored from the backup into new
	// VMs (new machines, booted from the ISO).
	w.make("destroy", "YES=1")
	assert.Empty(t, w.pve.VMIDs(), "every VM gone")
	assert.Empty(t, w.nodes.EtcdKeys(), "etcd gone with the control planes' disks")
	start = time.Now()
	w.make("restore", "IDENTITY="+w.identityFile)
	t.Logf("whole-stack restore: %s", time.Since(start).Round(time.Second))
	assert.Equal(t, "kept", w.nodes.EtcdKeys()["/registry/configmaps/default/e2e"], "etcd as the backup had it")
	for _, m := range machines[:5] {
		assert.NotNil(t, w.pve.VM(m.vmID), "VM %d made again", m.vmID)
		assert.False(t, w.nodes.Node(m.ip).InMaintenance(), "%s installed", m.name)
	}
	w.noChange("after the whole-stack restore")

	start = time.Now()
	w.make("destroy", "YES=1")
	t.Logf("destroy: %s", time.Since(start).Round(time.Second))
	assert.Empty(t, w.pve.VMIDs(), "every VM gone")
	roles, users, tokens, acls = w.pve.Access()
	assert.Empty(t, roles, "the CSI role gone")
	assert.Empty(t, users, "its user gone")
	assert.Empty(t, tokens, "its token gone")
	assert.Empty(t, acls, "its ACLs gone")
}

// edit replaces old by new in the stack file; old must be there.
func (w *world) edit(old, new string) {
	w.t.Helper()
	path := filepath.Join(w.repo, "Pulumi."+w.stackName()+".yaml")
	data, err := os.ReadFile(path)
	require.NoError(w.t, err)
	require.Contains(w.t, string(data), old, "the stack file has the line to change")
	require.NoError(w.t, os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o600))
}

// upFails is make up that must fail; it returns the output.
func (w *world) upFails(vars ...string) string {
	w.t.Helper()
	out, err := w.run("make", append([]string{"-C", w.repo, "up", "STACK=" + w.stackName()}, vars...)...)
	require.Error(w.t, err, "make up must fail")
	return out
}

// newWorld starts the fakes, copies the repository and makes the stack.
func newWorld(t *testing.T) *world {
	t.Helper()
	if l, err := net.Listen("tcp", pveAddr); err != nil {
		t.Skipf("SKIPPED: 10.77.0.0/24 is not local here (%v): make e2e runs this test in a network namespace where it is", err)
	} else {
		_ = l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	t.Cleanup(cancel)
	charts := e2etest.Charts(t, talos.DefaultCiliumVersion, talos.DefaultApproverVersion,
		e2etest.Repo{Host: "ghcr.io", Chart: charttest.Chart{Dir: csiChart(t), Version: proxmox.DefaultCSIChartVersion}})
	// gRPC honours HTTPS_PROXY too: the plugins and the program's hooks
	// reach the machines, the API server and Proxmox directly.
	t.Setenv("NO_PROXY", "10.77.0.0/24")
	w := &world{t: t, ctx: ctx}

	factory := factorytest.New(t)
	charts.Trust(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: factory.Certificate().Raw}))
	w.pve = pveapitest.NewAt(t, map[int]*pveapitest.VM{}, pveAddr)
	charts.Trust(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.pve.Certificate().Raw}))
	w.pve.AddDatastore("local-lvm", pveapitest.Datastore{Content: []string{"images", "rootdir"}})
	w.pve.Web = factory.Client()

	var specs []talosapitest.NodeSpec
	var cpIPs []string
	for _, m := range machines {
		// The guest agent (the schematic's qemu-guest-agent extension)
		// reports the VM's address once Talos runs, which bpg waits for.
		w.pve.AgentAddresses(m.vmID, m.ip)
		role := talosapitest.Worker
		if m.cp {
			role = talosapitest.ControlPlane
			cpIPs = append(cpIPs, m.ip)
		}
		specs = append(specs, talosapitest.NodeSpec{IP: m.ip, Hostname: m.name, Role: role, Listen: m.ip + ":50000", Maintenance: true,
			RebootLatency: 200 * time.Millisecond, Version: "v1.13.9"})
	}
	// A real etcd holds the cluster's contents: a backup holds its real
	// snapshot, a recovery restores it with etcdutl as Talos does.
	w.nodes = realetcd.StartFresh(t, specs...)
	// As Talos's bootstrap: the API server at the VIP and on each control
	// plane's address (its own API server, which the rollout's waits
	// read), one etcd behind them all.
	w.kube = &e2etest.Kube{Addr: vip + ":6443", More: cpIPs, CNI: talos.SystemNamespace + "/" + talos.CiliumRelease}
	for _, m := range machines {
		w.kube.Nodes = append(w.kube.Nodes, kubesim.Node{Name: m.name, IP: m.ip, ControlPlane: m.cp, KubeletVersion: "v1.35.4"})
	}
	w.nodes.OnApply(func(node string, config []byte) {
		if node == cpIPs[0] {
			w.kube.Start(ctx, t, config)
		}
	})
	// A VM destroyed takes its disks: a VM made again boots a new machine
	// from the ISO.
	w.pve.OnDestroy = func(vmid int) {
		for _, m := range machines {
			if m.vmID == vmid {
				w.nodes.NewMachine(m.ip)
			}
		}
	}
	key, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	w.identityFile = filepath.Join(t.TempDir(), "backup-key.txt")
	require.NoError(t, os.WriteFile(w.identityFile, []byte(key.String()+"\n"), 0o600))

	w.repo = copyRepo(t)
	stackFile, err := os.ReadFile("testdata/Pulumi.e2e.yaml")
	require.NoError(t, err)
	stackFile = bytes.ReplaceAll(stackFile, []byte("FACTORY_URL"), []byte(factory.URL))
	stackFile = bytes.ReplaceAll(stackFile, []byte("TOKEN_ID"), []byte(pveapitest.TokenID))
	stackFile = bytes.ReplaceAll(stackFile, []byte("BACKUP_TARGET"), []byte("file://"+t.TempDir()))
	stackFile = bytes.ReplaceAll(stackFile, []byte("BACKUP_RECIPIENT"), []byte(key.Recipient().String()))
	require.NoError(t, os.WriteFile(filepath.Join(w.repo, "Pulumi."+stack+".yaml"), stackFile, 0o600))
	w.make("init")
	w.pulumi("config", "set", "--secret", "--path", "proxmox.apiTokenSecret", pveapitest.TokenSecret)
	return w
}

// make runs a make target of the stack in the copy, as a user runs it,
// and returns its output; it fails the test when make fails.
func (w *world) make(target string, vars ...string) string {
	w.t.Helper()
	out, err := w.run("make", append([]string{"-C", w.repo, target, "STACK=" + w.stackName()}, vars...)...)
	require.NoError(w.t, err, "make %s:\n%s", target, out)
	return out
}

// pulumi runs the CLI on the stack, in the project folder make uses.
func (w *world) pulumi(args ...string) string {
	w.t.Helper()
	out, err := w.run("pulumi", append(args, "--stack", w.stackName(), "--cwd", w.repo)...)
	require.NoError(w.t, err, "pulumi %s:\n%s", strings.Join(args, " "), out)
	return out
}

// run runs a command in the copy and logs its output.
func (w *world) run(name string, args ...string) (string, error) {
	cmd := exec.CommandContext(w.ctx, name, args...)
	cmd.Dir = w.repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	w.t.Logf("%s %s (%s):\n%s", name, strings.Join(args, " "), time.Since(start).Round(time.Second), out.String())
	return out.String(), err
}

// noChange runs make preview and fails the test when it shows a change or
// prints a warning.
func (w *world) noChange(step string) {
	w.t.Helper()
	out := w.make("preview")
	for _, change := range []string{" to create", " to update", " to delete", " to replace", "warning:"} {
		assert.NotContains(w.t, out, change, "%s: a preview shows no change and no warning", step)
	}
}

// csiChartCommit is the last commit of the Proxmox CSI plugin's repository
// whose chart is version 0.3.5 (proxmox.DefaultCSIChartVersion): the one
// before 1f10218 ("version: 0.3.6").
const csiChartCommit = "1f10218dce4c78191d390b5fa839c6cd2516e33e^"

// csiChartMirror is where the harness's fetch puts the plugin's repository.
const csiChartMirror = "/work/.mirror/sergelogvinov+proxmox-csi-plugin/repo"

// csiChart extracts the plugin's chart (published at
// oci://ghcr.io/sergelogvinov/charts) from its repository.
func csiChart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := fmt.Sprintf("git --git-dir=%q archive %q charts/proxmox-csi-plugin | tar -x -C %q", csiChartMirror, csiChartCommit, dir)
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: the Proxmox CSI plugin's chart (fetch github:sergelogvinov/proxmox-csi-plugin into %s): %v: %s", csiChartMirror, err, out)
	}
	return filepath.Join(dir, "charts/proxmox-csi-plugin")
}

// copyRepo copies the repository's tracked files as they are in the work
// tree, and the binaries make e2e built, into a folder of the test: make's
// stack targets then run there, on their own stack file, backend and
// access files, and find the program and stackctl up to date.
func copyRepo(t *testing.T) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err)
	src := strings.TrimSpace(string(top))
	dst := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(dst, 0o700))
	script := fmt.Sprintf("git -C %q ls-files -z | tar -C %q --null -T - -cf - | tar -C %q -xf -", src, src, dst)
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	require.NoError(t, err, "%s", out)
	// Copied after the sources, the binaries are newer than them.
	require.NoError(t, os.MkdirAll(filepath.Join(dst, "bin"), 0o700))
	for _, bin := range []string{"talos-cluster", "stackctl"} {
		out, err := exec.Command("cp", filepath.Join(src, "bin", bin), filepath.Join(dst, "bin", bin)).CombinedOutput()
		require.NoError(t, err, "make e2e builds bin/%s first: %s", bin, out)
	}
	return dst
}
