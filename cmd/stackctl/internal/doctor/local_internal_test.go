package doctor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/testkit/dockertest"
	"github.com/fluodata/talos-pulumi/stacks"
)

// localEnv dials for real, with DOCKER_HOST as given, on this machine
// only: a registry's name is routes' (host:port to a loopback address)
// or refused, so the tests never leave it.
func localEnv(dockerHost string, routes ...map[string]string) Env {
	var d net.Dialer
	return Env{
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if network == "unix" || strings.HasPrefix(addr, "127.0.0.1:") {
				return d.DialContext(ctx, network, addr)
			}
			for _, r := range routes {
				if to, ok := r[addr]; ok {
					return d.DialContext(ctx, network, to)
				}
			}
			return nil, fmt.Errorf("dial %s: no route from the test", addr)
		},
		Getenv:  func(k string) string { return map[string]string{"DOCKER_HOST": dockerHost}[k] },
		Timeout: 2 * time.Second,
	}
}

// engineInfo is GET /info of Debian's Docker Engine on cgroup v2, the
// fields the doctor reads (moby api/types/system.Info).
const engineInfo = `{"OperatingSystem":"Debian GNU/Linux 13 (trixie)","CgroupVersion":"2","SecurityOptions":["name=seccomp,profile=builtin","name=cgroupns"]}`

// pingServer answers /_ping on a Unix socket as dockerd does (moby's
// api/server/router/system: 200 "OK" with an Api-Version header), /info
// (engineInfo), and /images/<name>/json (api/server/router/image: 200 for
// an image it holds, 404 otherwise) for the images given.
func pingServer(t *testing.T, status int, images ...string) string {
	t.Helper()
	return infoServer(t, status, engineInfo, images...)
}

// infoServer is pingServer answering /info with info.
func infoServer(t *testing.T, status int, info string, images ...string) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := strings.CutPrefix(r.URL.Path, "/images/"); ok {
			if slices.Contains(images, strings.TrimSuffix(name, "/json")) {
				_, _ = w.Write([]byte(`{"Id":"sha256:0"}`))
				return
			}
			http.Error(w, `{"message":"No such image"}`, http.StatusNotFound)
			return
		}
		if r.URL.Path == "/info" {
			_, _ = w.Write([]byte(info))
			return
		}
		if r.URL.Path == "/networks" {
			// moby's api/server/router/network: the networks as a list.
			_, _ = w.Write([]byte(`[{"Name":"bridge","Labels":{},"IPAM":{"Config":[{"Subnet":"172.17.0.0/16","Gateway":"172.17.0.1"}]}},` +
				`{"Name":"talos-default","Labels":{"talos.cluster.name":"talos-default"},"IPAM":{"Config":[{"Subnet":"10.5.0.0/24"}]}},` +
				`{"Name":"local","Labels":{"talos.cluster.name":"local"},"IPAM":{"Config":[{"Subnet":"10.6.0.0/24"}]}}]`))
			return
		}
		if r.URL.Path != "/_ping" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Api-Version", "1.41")
		w.WriteHeader(status)
		_, _ = w.Write([]byte("OK"))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return socket
}

func TestLocalChecksTheDockerDaemon(t *testing.T) {
	t.Parallel()
	cfg := &stacks.Config{Platform: stacks.PlatformLocal}
	ctx := context.Background()

	up := checkLocal(ctx, localEnv("unix://"+pingServer(t, http.StatusOK)), cfg, "local")[0]
	assert.Equal(t, OK, up.Level, up.Message)
	assert.Contains(t, up.Message, "API 1.41")

	failing := checkDocker(ctx, localEnv("unix://"+pingServer(t, http.StatusInternalServerError)))
	assert.Equal(t, Fail, failing.Level)

	none := checkDocker(ctx, localEnv("unix://"+filepath.Join(t.TempDir(), "none.sock")))
	assert.Equal(t, Fail, none.Level)
	assert.Contains(t, none.Message, "install Docker Engine")

	remote := checkDocker(ctx, localEnv("tcp://10.0.0.5:2375"))
	assert.Equal(t, Fail, remote.Level)
	assert.Contains(t, remote.Message, "run on the Docker host itself")
}

// A daemon the local platform cannot work with is refused by name, with
// what to do instead: Docker Desktop without published APIs, rootless
// Docker, cgroup v1 under a
// kubelet that refuses it (Talos v1.13.9's default Kubernetes is 1.36).
func TestLocalChecksTheDockerHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := &stacks.Config{Platform: stacks.PlatformLocal, Cluster: stacks.ClusterConfig{TalosVersion: "v1.13.9"}}
	check := func(info string, cfg *stacks.Config) []Result {
		return checkDockerHost(ctx, localEnv("unix://"+infoServer(t, http.StatusOK, info)), cfg)
	}
	assert.Equal(t, []Result{{OK, "docker", "Debian GNU/Linux 13 (trixie), cgroup v2"}}, check(engineInfo, cfg))

	desktop := check(`{"OperatingSystem":"Docker Desktop","CgroupVersion":"2"}`, cfg)
	require.Len(t, desktop, 1)
	assert.Equal(t, Fail, desktop[0].Level)
	assert.Contains(t, desktop[0].Message, "set local.apiAccess: published")
	published := *cfg
	published.Local.APIAccess = "published"
	assert.Equal(t, []Result{{OK, "docker", "Docker Desktop, cgroup v2"}}, check(`{"OperatingSystem":"Docker Desktop","CgroupVersion":"2"}`, &published),
		"published ports go around the VM's bridge")

	rootless := check(`{"OperatingSystem":"Ubuntu 24.04","CgroupVersion":"2","SecurityOptions":["name=seccomp,profile=builtin","name=rootless","name=cgroupns"]}`, cfg)
	require.Len(t, rootless, 1)
	assert.Equal(t, Fail, rootless[0].Level)
	assert.Contains(t, rootless[0].Message, "use the system daemon")

	v1 := check(`{"OperatingSystem":"CentOS Linux 7","CgroupVersion":"1"}`, cfg)
	require.Len(t, v1, 1)
	assert.Equal(t, Result{Fail, "cgroups", "the Docker host runs cgroup v1, which kubelet 1.35 and later refuse (Kubernetes 1.36.3): " +
		"boot it with cgroup v2 (kernel argument systemd.unified_cgroup_hierarchy=1), or set cluster.kubernetesVersion to 1.34"}, v1[0])
	older := *cfg
	older.Cluster.KubernetesVersion = "1.34.2"
	assert.Equal(t, OK, check(`{"OperatingSystem":"CentOS Linux 7","CgroupVersion":"1"}`, &older)[0].Level, "kubelet 1.34 runs on cgroup v1")
}

// A mount's source missing on this machine fails by its key.
func TestLocalChecksMountSources(t *testing.T) {
	t.Parallel()
	here := t.TempDir()
	env := localEnv("")
	env.Stat = os.Stat
	cfg := &stacks.Config{Platform: stacks.PlatformLocal, Local: stacks.LocalConfig{Mounts: []stacks.LocalMountConfig{
		{Source: here, Target: "/mnt/a"}, {Source: filepath.Join(here, "missing"), Target: "/mnt/b"},
	}}}
	rs := checkMountSources(env, cfg)
	require.Len(t, rs, 2)
	assert.Equal(t, OK, rs[0].Level)
	assert.Equal(t, Fail, rs[1].Level)
	assert.Contains(t, rs[1].Message, "local.mounts[1].source: "+filepath.Join(here, "missing")+" is not on this machine")
}

// A kernel without IPv6 fails unless local.disableIPv6 says so.
func TestLocalChecksIPv6(t *testing.T) {
	t.Parallel()
	env := localEnv("")
	cfg := &stacks.Config{Platform: stacks.PlatformLocal}
	env.Stat = func(string) (os.FileInfo, error) { return nil, os.ErrNotExist }
	r, ok := checkIPv6(env, cfg)
	require.True(t, ok)
	assert.Equal(t, Fail, r.Level)
	assert.Contains(t, r.Message, "set local.disableIPv6: true")
	cfg.Local.DisableIPv6 = true
	_, ok = checkIPv6(env, cfg)
	assert.False(t, ok, "not checked when IPv6 is off")

	env.Stat = os.Stat // this machine: the real file
	if _, err := os.Stat(ipv6Sysctl); err == nil {
		r, ok = checkIPv6(env, &stacks.Config{Platform: stacks.PlatformLocal})
		require.True(t, ok)
		assert.Equal(t, OK, r.Level, r.Message)
	}
}

// Another Docker network on the nodes' subnet (talosctl cluster create's
// on the same default) would make up fail: named, with what to do; the
// cluster's own network from an earlier up is not another.
func TestLocalChecksTheSubnet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := localEnv("unix://" + pingServer(t, http.StatusOK))
	cfgOn := func(gw string, prefix int) *stacks.Config {
		return &stacks.Config{Platform: stacks.PlatformLocal, Cluster: stacks.ClusterConfig{Name: "local", Network: stacks.NetworkConfig{Gateway: gw, PrefixLength: prefix}}}
	}
	r := checkSubnet(ctx, env, cfgOn("10.5.0.1", 24))
	assert.Equal(t, Fail, r.Level)
	assert.Contains(t, r.Message, `the Docker network "talos-default" holds 10.5.0.0/24, which overlaps the nodes' network 10.5.0.0/24`)
	assert.Equal(t, OK, checkSubnet(ctx, env, cfgOn("10.6.0.1", 24)).Level, "its own network")
	assert.Equal(t, OK, checkSubnet(ctx, env, cfgOn("10.214.0.1", 24)).Level)
}

// The nodes' image: there, or pullable from a registry that answers, or
// neither (a failure naming the image and the registry).
func TestLocalChecksTheImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := &stacks.Config{Platform: stacks.PlatformLocal, Cluster: stacks.ClusterConfig{TalosVersion: "v1.13.9"}}
	const image = "ghcr.io/siderolabs/talos:v1.13.9"

	rs := checkLocal(ctx, localEnv("unix://"+pingServer(t, http.StatusOK, image)), cfg, "local")
	require.Len(t, rs, 6)
	assert.Equal(t, Result{OK, "image", image + " is on this machine"}, rs[2])

	registry, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = registry.Close() }()
	pullable := checkImage(ctx, localEnv("unix://"+pingServer(t, http.StatusOK), map[string]string{"ghcr.io:443": registry.Addr().String()}), image)
	assert.Equal(t, OK, pullable.Level, pullable.Message)
	assert.Contains(t, pullable.Message, "`up` pulls it from ghcr.io")

	none := checkImage(ctx, localEnv("unix://"+pingServer(t, http.StatusOK)), "standin:v1")
	assert.Equal(t, Fail, none.Level)
	assert.Contains(t, none.Message, "standin:v1 is not on this machine and its registry registry-1.docker.io does not answer")
}

// The real daemon, where this machine runs one (make deps installs
// Debian's docker.io): the fake above answers as it does.
func TestLocalChecksTheRealDockerDaemon(t *testing.T) {
	t.Parallel()
	if c, err := net.Dial("unix", DefaultDockerSocket); err != nil {
		t.Skipf("SKIPPED: no Docker daemon runs at %s (%v)", DefaultDockerSocket, err)
	} else {
		_ = c.Close()
	}
	r := checkDocker(context.Background(), localEnv(""))
	require.Equal(t, OK, r.Level, r.Message)
	assert.Contains(t, r.Message, "API 1.")
	// Its /info reads as the fake's: an engine, a cgroup version.
	host := checkDockerHost(context.Background(), localEnv(""), &stacks.Config{Platform: stacks.PlatformLocal, Cluster: stacks.ClusterConfig{TalosVersion: "v1.13.9"}})
	require.NotEmpty(t, host)
	assert.NotEqual(t, Warn, host[0].Level, host[0].Message)
	assert.Contains(t, host[len(host)-1].Message, "cgroup v")

	// The image's read answers as the fake's: 200 for one it holds, 404
	// (then the registry, unreachable from the test) for another.
	dockertest.Available(t)
	tag := fmt.Sprintf("standin-doctor-%d:v1", time.Now().UnixNano())
	dockertest.BuildStandin(t, tag)
	assert.Equal(t, Result{OK, "image", tag + " is on this machine"}, checkImage(context.Background(), localEnv(""), tag))
	assert.Equal(t, Fail, checkImage(context.Background(), localEnv(""), tag+"-none").Level)

	// Its networks' list reads as the fake's: the default bridge network
	// (172.17.0.0/16 unless the daemon is set up otherwise) is found.
	cfg := &stacks.Config{Platform: stacks.PlatformLocal, Cluster: stacks.ClusterConfig{Name: "local", Network: stacks.NetworkConfig{Gateway: "172.17.0.1", PrefixLength: 16}}}
	r = checkSubnet(context.Background(), localEnv(""), cfg)
	assert.Equal(t, Fail, r.Level, r.Message)
	assert.Contains(t, r.Message, `"bridge"`)
}

func TestLocalChecksItsPorts(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	taken := l.Addr().(*net.TCPAddr).Port
	cfg := &stacks.Config{Platform: stacks.PlatformLocal, Local: stacks.LocalConfig{KubernetesPort: taken, TalosPort: 1}}
	rs := checkLocal(context.Background(), localEnv("unix:///nonexistent"), cfg, "local")
	require.Len(t, rs, 3)
	assert.Equal(t, Warn, rs[1].Level)
	assert.True(t, strings.HasPrefix(rs[1].Message, "local.kubernetesPort: something listens on 127.0.0.1:"), rs[1].Message)
	assert.Equal(t, OK, rs[2].Level, rs[2].Message)

	// Left out, a taken default is no problem: a first up takes another.
	if l6443, err := net.Listen("tcp", "127.0.0.1:6443"); err == nil { // else taken already
		defer func() { _ = l6443.Close() }()
	}
	rs = checkLocal(context.Background(), localEnv("unix:///nonexistent"), &stacks.Config{Platform: stacks.PlatformLocal}, "local")
	require.Len(t, rs, 3)
	assert.Equal(t, Result{OK, "port", "local.kubernetesPort is left out and 6443 is taken: a first `up` publishes on another free port, later runs keep theirs"}, rs[1])
}
