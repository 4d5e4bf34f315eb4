//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubesim"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest/realetcd"
	"github.com/fluodata/talos-pulumi/internal/testkit/dockertest"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
)

// localStack is the local e2e stack's name; its file is
// testdata/Pulumi.local-e2e.yaml.
const localStack = "local"

// localMachines are the local e2e stack's nodes.
var localMachines = []machine{{"cp-0", "10.214.0.2", 0, true}, {"worker-0", "10.214.0.3", 0, false}, {"worker-1", "10.214.0.4", 0, false}}

// localKubernetes is the local e2e stack's Kubernetes version: 1.32, whose
// kubelet still runs on a cgroup v1 Docker host (1.35 and later refuse it,
// and make doctor refuses the stack there), so the test runs on any host.
const localKubernetes = "1.32.13"

// The host's ports of the stand-in's relay (internal/testkit/dockertest/standin).
const (
	talosBase      = 40000
	kubernetesBase = 41000
	noticeBase     = 42000
)

// TestE2ELocalStackLivesItsLifeInDocker runs the local stack through make,
// as the README has a user run it, with the real CLI and plugins (docker,
// talos, kubernetes, command) against the real Docker daemon. The nodes'
// containers run the stand-in image, unprivileged, which relays each
// node's Talos API to the Talos fake's machine for it on this host
// (maintenance mode first, as a Talos container without USERDATA starts)
// and the first control plane's Kubernetes API to a real kube-apiserver
// started from its config; a container that stops takes its fake machine
// down, a new one boots it. kubesim plays the kubelets; the charts are
// the real ones. What only a machine with the real image runs: Talos
// itself in the containers (privileged), its kubelet, etcd and Cilium.
//
// It walks: first up; a preview with no change; a new Talos version (each
// container replaced, its volumes kept, after the etcd gate and waited for
// before the next one, the control plane first); a worker removed; destroy
// (no container, volume or network left).
func TestE2ELocalStackLivesItsLifeInDocker(t *testing.T) {
	if l, err := net.Listen("tcp", "10.77.0.1:0"); err == nil {
		_ = l.Close()
		t.Skip("SKIPPED: inside make e2e's network namespace, which the containers' network is not in: make e2e runs this test outside it")
	}
	if _, err := exec.LookPath("pulumi"); err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH (../shared/harness)")
	}
	dockertest.Available(t)
	apiServer := upgradeAPIServer(t, localKubernetes)
	if out, _ := exec.Command("pulumi", "plugin", "ls").CombinedOutput(); !bytes.Contains(out, []byte(docker.PluginVersion)) {
		t.Skipf("SKIPPED: no docker plugin %s (scripts/harness-docker-plugin.sh builds it)", docker.PluginVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	e2etest.Charts(t, talos.DefaultCiliumVersion, talos.DefaultApproverVersion)
	t.Setenv("NO_PROXY", "10.214.0.0/24,127.0.0.1")

	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	image := "standin-e2e-" + hex.EncodeToString(suffix)
	dockertest.BuildStandin(t, image+":v1.13.9", image+":v1.13.10")

	var specs []talosapitest.NodeSpec
	var kubeNodes []kubesim.Node
	for _, m := range localMachines {
		role := talosapitest.Worker
		if m.cp {
			role = talosapitest.ControlPlane
		}
		specs = append(specs, talosapitest.NodeSpec{IP: m.ip, Hostname: m.name, Role: role, Listen: fmt.Sprintf("0.0.0.0:%d", talosBase+lastByte(m.ip)),
			Maintenance: true, RebootLatency: 200 * time.Millisecond, ServiceDelay: serviceDelay, Version: "v1.13.9"})
		kubeNodes = append(kubeNodes, kubesim.Node{Name: m.name, IP: m.ip, ControlPlane: m.cp, KubeletVersion: "v" + localKubernetes})
	}
	// A real etcd holds the cluster's contents: a backup holds its real
	// snapshot.
	nodes := realetcd.StartFresh(t, specs...)
	cp := localMachines[0].ip
	kube := &e2etest.Kube{Addr: fmt.Sprintf("127.0.0.1:%d", kubernetesBase+lastByte(cp)), More: []string{cp}, CNI: talos.SystemNamespace + "/" + talos.CiliumRelease, Nodes: kubeNodes,
		APIServer: realapiserver.Options{Binary: apiServer}}
	nodes.OnApply(func(node string, config []byte) {
		if node == cp {
			kube.Start(ctx, t, config)
		}
	})
	booted := map[string]*bootTimes{}
	for _, m := range localMachines {
		booted[m.name] = followContainer(t, nodes, m.ip)
	}

	w := &world{t: t, ctx: ctx, nodes: nodes, kube: kube, stack: localStack, repo: copyRepo(t)}
	stackFile, err := os.ReadFile("testdata/Pulumi.local-e2e.yaml")
	require.NoError(t, err)
	key, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	stackFile = bytes.ReplaceAll(stackFile, []byte("IMAGE"), []byte(image))
	stackFile = bytes.ReplaceAll(stackFile, []byte("KUBERNETES_VERSION"), []byte(localKubernetes))
	stackFile = bytes.ReplaceAll(stackFile, []byte("BACKUP_TARGET"), []byte("file://"+t.TempDir()))
	stackFile = bytes.ReplaceAll(stackFile, []byte("BACKUP_RECIPIENT"), []byte(key.Recipient().String()))
	require.NoError(t, os.WriteFile(filepath.Join(w.repo, "Pulumi."+localStack+".yaml"), stackFile, 0o600))
	w.make("init")
	t.Cleanup(func() { _, _ = w.run("make", "-C", w.repo, "destroy", "STACK="+localStack, "YES=1") })

	// make doctor, as make local runs it first: the daemon, the image, the
	// ports free.
	doctor := w.make("doctor")
	for _, want := range []string{"answers (API 1.", image + ":v1.13.9 is on this machine", "127.0.0.1:46443 is free", "127.0.0.1:45000 is free", "no other Docker network overlaps 10.214.0.0/24"} {
		assert.Contains(t, doctor, want)
	}

	start := time.Now()
	w.make("up", "YES=1")
	t.Logf("first up: %s", time.Since(start).Round(time.Second))
	assert.True(t, nodes.Bootstrapped(), "the first control plane is bootstrapped")
	for _, m := range localMachines {
		assert.False(t, nodes.Node(m.ip).InMaintenance(), "%s has its config", m.name)
		c := dockertest.Inspect(t, "e2elocal-"+m.name)
		assert.Equal(t, image+":v1.13.9", c.Image)
		assert.Equal(t, m.ip, c.IP)
		assert.NotContains(t, c.Env, "USERDATA", "the config went over the Talos API")
	}
	// The published Kubernetes API on 127.0.0.1 is the cluster's.
	conn, err := tls.Dial("tcp", "127.0.0.1:46443", &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only the certificate's name is read
	require.NoError(t, err)
	assert.Equal(t, "kube-apiserver", conn.ConnectionState().PeerCertificates[0].Subject.CommonName)
	_ = conn.Close()
	w.noChange("after the first up")

	// A backup works as on the other platforms: the Talos API's etcd
	// snapshot, through the first control plane.
	assert.Contains(t, w.make("backup"), "etcd's hash checks", "a real etcd snapshot")

	// A new Talos version is a new image: each container is replaced, its
	// volumes kept, one node at a time, the control plane first.
	bootsBefore := map[string]int{}
	for _, m := range localMachines {
		bootsBefore[m.name] = nodes.Node(m.ip).Boots()
	}
	w.edit("v1.13.9 # e2e: talosVersion", "v1.13.10 # e2e: talosVersion")
	w.edit(image+":v1.13.9 # e2e: image", image+":v1.13.10 # e2e: image")
	start = time.Now()
	out := w.make("up", "YES=1")
	t.Logf("new Talos version: %s", time.Since(start).Round(time.Second))
	var order []string
	for _, line := range strings.Split(out, "\n") {
		for _, m := range localMachines {
			// The progress's line of each; the summary repeats them.
			if strings.Contains(line, m.name+" ("+m.ip+") restarts on its new machine") && !slices.Contains(order, m.name) {
				order = append(order, m.name)
			}
		}
	}
	assert.Equal(t, []string{"cp-0", "worker-0", "worker-1"}, order, "each node gated in the rollout's order")
	var created []string
	for _, m := range localMachines {
		c := dockertest.Inspect(t, "e2elocal-"+m.name)
		assert.Equal(t, image+":v1.13.10", c.Image)
		assert.Equal(t, "2", dockertest.Boots(t, "e2elocal-"+m.name, "2"), "%s: the new container found the node's state", m.name)
		assert.Equal(t, bootsBefore[m.name]+1, nodes.Node(m.ip).Boots(), "%s went down with its container and came back once", m.name)
		created = append(created, c.Created)
	}
	assert.IsIncreasing(t, created, "one container after the other")
	// The next node's container goes only once the one before is back
	// and healthy (its services take serviceDelay after it boots).
	for i := 1; i < len(localMachines); i++ {
		before, next := localMachines[i-1].name, localMachines[i].name
		createdAt, err := time.Parse(time.RFC3339Nano, created[i])
		require.NoError(t, err)
		assert.GreaterOrEqual(t, createdAt.Sub(booted[before].last()), serviceDelay,
			"%s's new container waited until %s was healthy", next, before)
	}
	w.noChange("after the new version")

	// A worker removed: it leaves the cluster, then its container and
	// volumes go.
	w.edit("      - name: worker-1 # e2e: worker-1\n        ip: 10.214.0.4 # e2e: worker-1 ip\n", "")
	w.make("up", "YES=1")
	assert.Len(t, dockertest.Labelled(t, "e2elocal", "ps", "-a"), 2)
	assert.Len(t, dockertest.Labelled(t, "e2elocal", "volume", "ls"), 12)
	w.noChange("after a worker removed")

	// Added again: a new container on new volumes is a new machine in
	// maintenance mode, which gets its config and joins.
	w.edit("      - name: worker-0\n        ip: 10.214.0.3\n", "      - name: worker-0\n        ip: 10.214.0.3\n      - name: worker-1\n        ip: 10.214.0.4\n")
	w.make("up", "YES=1")
	assert.False(t, nodes.Node("10.214.0.4").InMaintenance(), "worker-1 has its config")
	assert.Equal(t, "1", dockertest.Boots(t, "e2elocal-worker-1", "1"), "on new volumes")
	assert.Len(t, dockertest.Labelled(t, "e2elocal", "volume", "ls"), 18)
	w.noChange("after a worker added")

	w.make("destroy", "YES=1")
	for _, kind := range [][]string{{"ps", "-a"}, {"volume", "ls"}, {"network", "ls"}} {
		assert.Empty(t, dockertest.Labelled(t, "e2elocal", kind...), "docker %s: nothing of the stack is left", kind[0])
	}
	// A second destroy (a retry, the smoke's teardown) leaves the state
	// empty too.
	w.make("destroy", "YES=1")
	assert.NotContains(t, w.make("pulumi", "ARGS=stack export --stack "+localStack), `"urn"`, "the state holds nothing")
}

// serviceDelay is how long the fake machines' services take to be healthy
// after a boot.
const serviceDelay = time.Second

// bootTimes are when a fake machine was booted by its new container.
type bootTimes struct {
	mu    sync.Mutex
	times []time.Time
}

// last is the last boot's time (zero for none).
func (b *bootTimes) last() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.times) == 0 {
		return time.Time{}
	}
	return b.times[len(b.times)-1]
}

// followContainer takes the fake machine at ip down when its container
// says it stops and boots it when a new one starts (the stand-in's
// notices), and records when; a container on new volumes (its first boot)
// is a new machine, in maintenance mode.
func followContainer(t *testing.T, cluster *talosapitest.Cluster, ip string) *bootTimes {
	t.Helper()
	n := cluster.Node(ip)
	b := &bootTimes{}
	l, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", noticeBase+lastByte(n.IP())))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			_ = c.Close()
			what, boots, _ := strings.Cut(strings.TrimSpace(line), " ")
			switch {
			case what == "down":
				n.PowerOff()
			case what == "up" && boots == "1" && !n.InMaintenance():
				cluster.NewMachine(ip)
			case what == "up":
				if !n.Up() {
					n.PowerOn()
					b.mu.Lock()
					b.times = append(b.times, time.Now())
					b.mu.Unlock()
				}
			}
		}
	}()
	return b
}

// lastByte is the last byte of an IPv4 address.
func lastByte(ip string) int {
	a := net.ParseIP(ip).To4()
	return int(a[3])
}
