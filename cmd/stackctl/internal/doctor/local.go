package doctor

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/internal/talosversion"
	"github.com/fluodata/talos-pulumi/stacks"
)

// DefaultDockerSocket is where the Docker daemon listens unless DOCKER_HOST
// says otherwise (the Docker CLI's default).
const DefaultDockerSocket = "/var/run/docker.sock"

// checkLocal checks what a local stack needs of this machine: a Docker
// daemon this user may use, the nodes' image (there, or its registry
// reachable), and the ports on 127.0.0.1 the first control plane's APIs
// are published on.
func checkLocal(ctx context.Context, env Env, cfg *stacks.Config, _ string) []Result {
	daemon := checkDocker(ctx, env)
	out := []Result{daemon}
	if daemon.Level == OK {
		out = append(out, checkDockerHost(ctx, env, cfg)...)
		out = append(out, checkImage(ctx, env, localImage(cfg)), checkSubnet(ctx, env, cfg))
	}
	if r, ok := checkIPv6(env, cfg); ok {
		out = append(out, r)
	}
	out = append(out, checkMountSources(env, cfg)...)
	for _, p := range []struct {
		key  string
		port int
		def  int
	}{
		{"local.kubernetesPort", cfg.Local.KubernetesPort, docker.DefaultKubernetesPort},
		{"local.talosPort", cfg.Local.TalosPort, docker.DefaultTalosPort},
	} {
		r := checkLocalPort(ctx, env, p.key, cmp.Or(p.port, p.def))
		if p.port == 0 && r.Level == Warn {
			r = Result{OK, "port", fmt.Sprintf("%s is left out and %d is taken: a first `up` publishes on another free port, later runs keep theirs", p.key, p.def)}
		}
		out = append(out, r)
	}
	return out
}

// dockerSocket is the daemon's Unix socket, from DOCKER_HOST when it names
// one; "" when DOCKER_HOST names another kind of address.
func dockerSocket(env Env) string {
	host := env.Getenv("DOCKER_HOST")
	if host == "" {
		return DefaultDockerSocket
	}
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		return path
	}
	return ""
}

// checkDocker asks the daemon's /_ping, as the Docker CLI does first.
func checkDocker(ctx context.Context, env Env) Result {
	socket := dockerSocket(env)
	if socket == "" {
		return Result{Fail, "docker", fmt.Sprintf("DOCKER_HOST=%s is not this machine's daemon socket: the nodes' addresses would be on the Docker host's bridge, "+
			"which this machine does not route to; run on the Docker host itself, with its unix:// socket", env.Getenv("DOCKER_HOST"))}
	}
	status, header, err := dockerGet(ctx, env, socket, "/_ping")
	switch {
	case errors.Is(err, syscall.EACCES):
		return Result{Fail, "docker", fmt.Sprintf("this user may not use the Docker daemon at %s: add it to the docker group (`sudo usermod -aG docker $USER`, then log in again)", socket)}
	case errors.Is(err, errNoDaemon):
		return Result{Fail, "docker", fmt.Sprintf("no Docker daemon answers at %s (%v): install Docker Engine (Debian: `sudo apt-get install docker.io`) and start it (`sudo systemctl start docker`)", socket, err)}
	case err != nil:
		return Result{Fail, "docker", fmt.Sprintf("the Docker daemon at %s does not answer its ping: %v", socket, err)}
	case status != http.StatusOK:
		return Result{Fail, "docker", fmt.Sprintf("the Docker daemon at %s answers its ping with %d %s", socket, status, http.StatusText(status))}
	}
	return Result{OK, "docker", fmt.Sprintf("the Docker daemon at %s answers (API %s)", socket, header.Get("Api-Version"))}
}

// errNoDaemon is a socket nothing answers on.
var errNoDaemon = errors.New("no daemon")

// dockerGet is one GET of the Docker Engine API on socket: the answer's
// status and header (its body is read and dropped).
func dockerGet(ctx context.Context, env Env, socket, path string) (int, http.Header, error) {
	status, header, _, err := dockerRead(ctx, env, socket, path)
	return status, header, err
}

// dockerRead is dockerGet with the body (at most 4 MiB).
func dockerRead(ctx context.Context, env Env, socket, path string) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, env.Timeout)
	defer cancel()
	conn, err := env.Dial(ctx, "unix", socket)
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			return 0, nil, nil, err
		}
		return 0, nil, nil, fmt.Errorf("%w: %w", errNoDaemon, err)
	}
	defer func() { _ = conn.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker"+path, nil)
	if err := req.Write(conn); err != nil {
		return 0, nil, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, resp.Header, body, err
}

// dockerInfo is what checkDockerHost reads of GET /info, as `docker info`
// shows it (moby v28.5.2 api/types/system/info.go; "name=rootless" is
// what daemon/info.go lists for a rootless daemon; "Docker Desktop" is the
// OperatingSystem Docker Desktop's daemon reports, not in moby's source).
type dockerInfo struct {
	OperatingSystem string
	CgroupVersion   string
	SecurityOptions []string
}

// checkDockerHost refuses, by what to do instead, a daemon the local
// platform cannot work with: Docker Desktop keeps the bridge in a VM this
// machine does not route to (local.apiAccess published goes around it),
// rootless Docker cannot give Talos privileged containers, and kubelet
// 1.35 and later refuse a host on cgroup v1.
func checkDockerHost(ctx context.Context, env Env, cfg *stacks.Config) []Result {
	status, _, body, err := dockerRead(ctx, env, dockerSocket(env), "/info")
	var info dockerInfo
	if err == nil && status == http.StatusOK {
		err = json.Unmarshal(body, &info)
	}
	if err != nil || status != http.StatusOK {
		return []Result{{Warn, "docker", fmt.Sprintf("unable to read the daemon's /info (%d, %v): Docker Desktop, rootless Docker and cgroup v1 not checked", status, err)}}
	}
	var out []Result
	switch {
	case info.OperatingSystem == "Docker Desktop" && cfg.Local.APIAccess != docker.AccessPublished:
		out = append(out, Result{Fail, "docker", "Docker Desktop runs the containers in a VM whose bridge this machine does not route to, so the program could not reach the nodes at their IPs: " +
			"set local.apiAccess: published, which reaches them through ports published on 127.0.0.1 (docs/local.md)"})
	case slices.Contains(info.SecurityOptions, "name=rootless"):
		out = append(out, Result{Fail, "docker", "this daemon is rootless Docker: its bridge lives in a user namespace this machine does not route to, and Talos needs privileged containers; " +
			"use the system daemon (DOCKER_HOST=unix:///var/run/docker.sock)"})
	}
	kube := cfg.Cluster.KubernetesVersion
	if kube == "" {
		kube = talosversion.DefaultKubernetes(cfg.Cluster.TalosVersion)
	}
	if minor, ok := talosversion.Minor(kube); ok && info.CgroupVersion == "1" && minor >= firstKubeletWithoutCgroupV1 {
		out = append(out, Result{Fail, "cgroups", fmt.Sprintf("the Docker host runs cgroup v1, which kubelet 1.%d and later refuse (Kubernetes %s): "+
			"boot it with cgroup v2 (kernel argument systemd.unified_cgroup_hierarchy=1), or set cluster.kubernetesVersion to 1.%d", firstKubeletWithoutCgroupV1, kube, firstKubeletWithoutCgroupV1-1)})
	}
	if len(out) == 0 {
		out = append(out, Result{OK, "docker", fmt.Sprintf("%s, cgroup v%s", info.OperatingSystem, info.CgroupVersion)})
	}
	return out
}

// firstKubeletWithoutCgroupV1 is the Kubernetes minor whose kubelet
// refuses to start on cgroup v1: failCgroupV1 defaults to true (kubernetes
// v1.35.4 pkg/kubelet/apis/config/v1beta1/defaults.go).
const firstKubeletWithoutCgroupV1 = 35

// checkIPv6 fails when this machine's kernel has no IPv6 and the
// containers would turn it on (their sysctl fails their start); ok is false
// when it was not checked (no Stat, or another machine's daemon).
func checkIPv6(env Env, cfg *stacks.Config) (Result, bool) {
	if env.Stat == nil || dockerSocket(env) == "" || cfg.Local.DisableIPv6 {
		return Result{}, false
	}
	if _, err := env.Stat(ipv6Sysctl); err != nil {
		return Result{Fail, "ipv6", fmt.Sprintf("this machine's kernel has no IPv6 (%s: %v): the containers' IPv6 sysctl would stop them from starting; set local.disableIPv6: true", ipv6Sysctl, err)}, true
	}
	return Result{OK, "ipv6", "this machine's kernel has IPv6"}, true
}

// checkMountSources fails for a local.mounts source missing on this
// machine: Docker refuses to bind a folder that does not exist.
func checkMountSources(env Env, cfg *stacks.Config) []Result {
	if env.Stat == nil || dockerSocket(env) == "" {
		return nil
	}
	var out []Result
	for i, m := range cfg.Local.Mounts {
		key := fmt.Sprintf("local.mounts[%d].source", i)
		if _, err := env.Stat(m.Source); err != nil {
			out = append(out, Result{Fail, "mount", fmt.Sprintf("%s: %s is not on this machine (%v): Docker refuses to mount a missing folder; create it or fix the path", key, m.Source, err)})
			continue
		}
		out = append(out, Result{OK, "mount", fmt.Sprintf("%s: %s is there", key, m.Source)})
	}
	return out
}

// ipv6Sysctl is the sysctl Talos's provisioner sets in each container
// (net.ipv6.conf.all.disable_ipv6), absent where the kernel has no IPv6.
const ipv6Sysctl = "/proc/sys/net/ipv6/conf/all/disable_ipv6"

// localImage is the nodes' image, as the DockerCluster defaults it.
func localImage(cfg *stacks.Config) string {
	if cfg.Local.Image != "" {
		return cfg.Local.Image
	}
	return docker.DefaultImageRepository + ":" + cfg.Cluster.TalosVersion
}

// checkImage says whether the nodes' image is there (GET
// /images/<name>/json, as `docker image inspect`), or else whether its
// registry answers, so that up can pull it.
func checkImage(ctx context.Context, env Env, image string) Result {
	if status, _, err := dockerGet(ctx, env, dockerSocket(env), "/images/"+image+"/json"); err == nil && status == http.StatusOK {
		return Result{OK, "image", fmt.Sprintf("%s is on this machine", image)}
	}
	registry := "registry-1.docker.io"
	if first, _, ok := strings.Cut(image, "/"); ok && strings.ContainsAny(first, ".:") {
		registry = first
	}
	ctx, cancel := context.WithTimeout(ctx, env.Timeout)
	defer cancel()
	conn, err := env.Dial(ctx, "tcp", net.JoinHostPort(registry, "443"))
	if err != nil {
		return Result{Fail, "image", fmt.Sprintf("%s is not on this machine and its registry %s does not answer (%v): `up` could not pull it; check the network, or `docker load` the image", image, registry, err)}
	}
	_ = conn.Close()
	return Result{OK, "image", fmt.Sprintf("%s is not on this machine yet: `up` pulls it from %s, which answers", image, registry)}
}

// checkLocalPort warns when something already listens on 127.0.0.1:port:
// the container's publication of it would fail, unless it is the cluster's
// own first control plane.
func checkLocalPort(ctx context.Context, env Env, key string, port int) Result {
	ctx, cancel := context.WithTimeout(ctx, env.Timeout)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conn, err := env.Dial(ctx, "tcp", addr)
	if err != nil {
		return Result{OK, "port", fmt.Sprintf("%s: %s is free", key, addr)}
	}
	_ = conn.Close()
	return Result{Warn, "port", fmt.Sprintf("%s: something listens on %s already: this stack's first control plane, or another program whose port the container cannot take (set %s to a free port)", key, addr, key)}
}

// dockerNetwork is what checkSubnet reads of a network (GET /networks, as
// `docker network ls` lists them).
type dockerNetwork struct {
	Name   string
	Labels map[string]string
	IPAM   struct{ Config []struct{ Subnet string } }
}

// checkSubnet fails when a Docker network that is not this cluster's holds
// a subnet overlapping the nodes' network: Docker refuses to make the
// cluster's ("Pool overlaps with other one on this address space"), e.g.
// the network of talosctl cluster create on the same default 10.5.0.0/24.
func checkSubnet(ctx context.Context, env Env, cfg *stacks.Config) Result {
	n := cfg.Cluster.Network
	gw, err := netip.ParseAddr(n.Gateway)
	if err != nil || n.PrefixLength == 0 {
		return Result{Warn, "network", "cluster.network is not set: the Docker networks were not compared with it"}
	}
	ours := netip.PrefixFrom(gw, n.PrefixLength).Masked()
	status, _, body, err := dockerRead(ctx, env, dockerSocket(env), "/networks")
	var nets []dockerNetwork
	if err == nil && status == http.StatusOK {
		err = json.Unmarshal(body, &nets)
	}
	if err != nil || status != http.StatusOK {
		return Result{Warn, "network", fmt.Sprintf("unable to list the Docker networks (%d, %v): not compared with %s", status, err, ours)}
	}
	for _, dn := range nets {
		if dn.Labels["talos.cluster.name"] == cfg.Cluster.Name {
			continue // this cluster's own, from an earlier up
		}
		for _, c := range dn.IPAM.Config {
			if p, err := netip.ParsePrefix(c.Subnet); err == nil && p.Overlaps(ours) {
				return Result{Fail, "network", fmt.Sprintf("the Docker network %q holds %s, which overlaps the nodes' network %s (cluster.network): remove it (`docker network rm %s`) or give cluster.network another subnet", dn.Name, p, ours, dn.Name)}
			}
		}
	}
	return Result{OK, "network", fmt.Sprintf("no other Docker network overlaps %s", ours)}
}
