package vps_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
)

// edKey is a rescue system's ed25519 host key line.
const edKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEONt2yazdFZHClu6cvjSAE8PwBKuH8NrEluMIX2CTD2"

// validArgs are two control planes and a worker on /32 addresses, every
// optional input left out.
func validArgs() *vps.ClusterArgs {
	node := func(name string, role talos.Role, ip string) servers.Node {
		return servers.Node{
			Name: name, Role: role, IP: ip, PrefixLength: 32, Gateway: "203.0.113.254",
			Rescue: servers.Rescue{Port: 22, User: "root", Password: pulumi.String("rescue-pw"), HostKey: edKey},
		}
	}
	return &vps.ClusterArgs{
		Cluster: talos.ClusterSettings{Name: "prod", TalosVersion: "v1.12.4"},
		VPS:     servers.Settings{AllowedCIDRs: []string{"198.51.100.0/24"}, RequireRescue: pulumi.BoolRef(true)},
		Nodes: []servers.Node{
			node("cp-0", talos.RoleControlPlane, "203.0.113.10"),
			node("cp-1", talos.RoleControlPlane, "203.0.113.11"),
			node("w-0", talos.RoleWorker, "203.0.113.20"),
		},
	}
}

func rsaKeyLine(t *testing.T) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pub, err := ssh.NewPublicKey(&k.PublicKey)
	require.NoError(t, err)
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}

// run builds the component under the mock engine with a probe that
// records its calls and finds no node in maintenance mode.
func run(t *testing.T, args *vps.ClusterArgs) (*componentstest.Engine, []string, error) {
	t.Helper()
	e := &componentstest.Engine{}
	var mu sync.Mutex
	var probed []string
	probe := func(_ context.Context, ip string) bool {
		mu.Lock()
		defer mu.Unlock()
		probed = append(probed, ip)
		return false
	}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := vps.NewClusterWithDeps(ctx, "prod", args, servers.Deps{Probe: probe, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", e))
	return e, probed, err
}

func TestValidArgsBuildTheCluster(t *testing.T) {
	t.Parallel()
	require.NoError(t, validArgs().Validate("prod"))
	e, probed, err := run(t, validArgs())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"203.0.113.10", "203.0.113.11", "203.0.113.20"}, probed)
	assert.Len(t, e.ByType(componentstest.RemoteCommand), 3)
	assert.Len(t, e.ByType(componentstest.Apply), 3)
	assert.Equal(t, "203.0.113.10", e.One(t, componentstest.Bootstrap).Inputs["node"].StringValue(), "the first node is bootstrapped")
}

// The optional inputs take their defaults, and a password given in plain
// text still only travels as a secret.
func TestOptionalInputsTakeTheirDefaults(t *testing.T) {
	t.Parallel()
	args := validArgs()
	args.Nodes[1].Rescue.HostKey = ""
	args.Nodes[2].Rescue.Host = "rescue.example.com"
	args.Nodes[2].InstallDisk = "/dev/nvme0n1"
	e, _, err := run(t, args)
	require.NoError(t, err)

	install := e.Named(t, componentstest.RemoteCommand, "prod-install-cp-0")
	conn := install.Inputs["connection"]
	require.True(t, conn.IsSecret(), "the connection holds the password")
	c := conn.SecretValue().Element.ObjectValue()
	assert.Equal(t, "203.0.113.10", c["host"].StringValue(), "the rescue host defaults to the node's IP")
	assert.Equal(t, edKey, c["hostKey"].StringValue())
	assert.True(t, strings.HasPrefix(install.Inputs["stdin"].StringValue(), "IMAGE_URL='https://factory.talos.dev/image/"+componentstest.SchematicID+"/v1.12.4/metal-amd64.raw.zst'\nREQUIRE_RESCUE='1'\nTARGET='/dev/sda'\n"),
		"the factory's image, written to /dev/sda")

	c1 := e.Named(t, componentstest.RemoteCommand, "prod-install-cp-1").Inputs["connection"].SecretValue().Element.ObjectValue()
	_, pinned := c1["hostKey"]
	assert.False(t, pinned, "no host key: none is passed")
	c2 := e.Named(t, componentstest.RemoteCommand, "prod-install-w-0").Inputs["connection"].SecretValue().Element.ObjectValue()
	assert.Equal(t, "rescue.example.com", c2["host"].StringValue())
	assert.Contains(t, e.Named(t, componentstest.RemoteCommand, "prod-install-w-0").Inputs["stdin"].StringValue(), "TARGET='/dev/nvme0n1'\n")

	env := e.Named(t, componentstest.LocalCommand, "prod-wait-cp-0").Inputs["environment"].ObjectValue()
	assert.Equal(t, "1800", env["WAIT_TIMEOUT"].StringValue(), "30m by default")
	assert.Equal(t, "30m", env["WAIT_LABEL"].StringValue())
	for _, r := range e.ByType(componentstest.Apply) {
		assert.Contains(t, r.DeletedWith, "prod-install-", "forget by default")
		assert.Nil(t, r.Inputs["onDestroy"].V)
	}
	schematic := e.One(t, componentstest.Schematic)
	assert.Contains(t, schematic.Inputs["schematic"].StringValue(), "officialExtensions: []", "no schematic given: the plain image's")
}

// TalosNodes gives a /32 node an on-link route to its gateway, a node in a
// wider network only the default route, and every node its role's firewall.
func TestTalosNodes(t *testing.T) {
	t.Parallel()
	args := validArgs()
	args.Nodes[2].PrefixLength, args.Nodes[2].Gateway = 24, "203.0.113.1"
	args.Nodes[2].Patches = []string{"machine:\n  sysctls:\n    a.b: \"1\"\n"}
	nodes := vps.TalosNodes(args)
	require.Len(t, nodes, 3)
	assert.Equal(t, []talos.Route{{Network: "203.0.113.254/32"}, {Network: "0.0.0.0/0", Gateway: "203.0.113.254"}}, nodes[0].Network.Routes)
	assert.Equal(t, []string{"203.0.113.10/32"}, nodes[0].Network.Addresses)
	assert.Equal(t, []talos.Route{{Network: "0.0.0.0/0", Gateway: "203.0.113.1"}}, nodes[2].Network.Routes)
	assert.Equal(t, []string{"203.0.113.20/24"}, nodes[2].Network.Addresses)
	assert.Equal(t, "/dev/sda", nodes[0].InstallDisk)
	assert.Equal(t, "cp-0", nodes[0].Hostname)
	assert.Equal(t, args.Nodes[2].Patches, nodes[2].UserPatches)
	assert.Contains(t, nodes[0].PlatformPatches[0], "name: etcd", "a control plane's firewall")
	assert.NotContains(t, nodes[2].PlatformPatches[0], "name: etcd", "a worker's firewall")

	fw := vps.FirewallOf(args)
	assert.Equal(t, []string{"203.0.113.10", "203.0.113.11"}, fw.ControlPlaneIPs)
	assert.Equal(t, []string{"203.0.113.10", "203.0.113.11", "203.0.113.20"}, fw.NodeIPs)
	assert.Equal(t, []string{"198.51.100.0/24"}, fw.OperatorCIDRs)

	targs := args.TalosArgs(pulumi.String("installer"))
	assert.Equal(t, args.Cluster, targs.Cluster)
	assert.Equal(t, nodes, targs.Nodes)
}

// Every invalid input is reported at its path, all of them at once, and
// nothing is registered (nor any node probed).
func TestValidateReportsEveryInvalidInputByPath(t *testing.T) {
	t.Parallel()
	rsaKey := rsaKeyLine(t)
	cases := []struct {
		name  string
		edit  func(a *vps.ClusterArgs)
		paths []string
		msg   string // in the error, when set
	}{
		{"cluster name missing", func(a *vps.ClusterArgs) { a.Cluster.Name = "" }, []string{"cluster.name"}, "is required"},
		{"talos version without v", func(a *vps.ClusterArgs) { a.Cluster.TalosVersion = "1.12.4" }, []string{"cluster.talosVersion"}, "needs the v prefix: v1.12.4"},
		{"bad nameserver", func(a *vps.ClusterArgs) { a.Cluster.Nameservers = []string{"1.1.1.1", "dns"} }, []string{"cluster.nameservers[1]"}, ""},
		{"schematic id and extensions", func(a *vps.ClusterArgs) {
			a.Schematic = &image.Schematic{ID: strings.Repeat("a", 64), Extensions: []string{"siderolabs/iscsi-tools"}}
		}, []string{"schematic"}, "either id or extensions"},
		{"schematic id not hex", func(a *vps.ClusterArgs) { a.Schematic = &image.Schematic{ID: "abc"} }, []string{"schematic.id"}, "64 lowercase hex"},
		{"extension twice", func(a *vps.ClusterArgs) {
			a.Schematic = &image.Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/iscsi-tools"}}
		}, []string{"schematic.extensions[1]"}, "is already listed at extensions[0]"},
		{"empty extension", func(a *vps.ClusterArgs) { a.Schematic = &image.Schematic{Extensions: []string{""}} }, []string{"schematic.extensions[0]"}, "is required"},
		{"extension without its owner", func(a *vps.ClusterArgs) { a.Schematic = &image.Schematic{Extensions: []string{"iscsi-tools"}} },
			[]string{"schematic.extensions[0]"}, "is not an extension name like siderolabs/qemu-guest-agent"},
		{"cidr not a cidr", func(a *vps.ClusterArgs) { a.VPS.AllowedCIDRs = []string{"198.51.100.0/24", "office"} }, []string{"vps.allowedCidrs[1]"}, "not a CIDR"},
		{"cidr with host bits", func(a *vps.ClusterArgs) { a.VPS.AllowedCIDRs = []string{"198.51.100.7/24"} }, []string{"vps.allowedCidrs[0]"}, "did you mean 198.51.100.0/24"},
		{"port out of range", func(a *vps.ClusterArgs) { a.VPS.PublicTCPPorts = []int{443, 70000} }, []string{"vps.publicTcpPorts[1]"}, "out of range 1-65535"},
		{"managed port", func(a *vps.ClusterArgs) { a.VPS.PublicTCPPorts = []int{6443} }, []string{"vps.publicTcpPorts[0]"}, "the Kubernetes API"},
		{"Hubble's peer port", func(a *vps.ClusterArgs) { a.VPS.PublicTCPPorts = []int{80, 4244} }, []string{"vps.publicTcpPorts[1]"}, "4244 is Hubble's peer service, which serves every node's network flows"},
		{"port twice", func(a *vps.ClusterArgs) { a.VPS.PublicTCPPorts = []int{80, 80} }, []string{"vps.publicTcpPorts[1]"}, "listed twice"},
		{"image URL not http", func(a *vps.ClusterArgs) { a.VPS.ImageURL = "ftp://mirror.example.com/metal.raw?X-Amz-Signature=s3cr3t" }, []string{"vps.imageUrl"}, "http(s)"},
		{"image URL without host", func(a *vps.ClusterArgs) { a.VPS.ImageURL = "https:///metal.raw" }, []string{"vps.imageUrl"}, ""},
		{"reboot command on two lines", func(a *vps.ClusterArgs) { a.VPS.RebootCommand = "boot-disk\nreboot" }, []string{"vps.rebootCommand"}, "one line"},
		{"wait timeout not a duration", func(a *vps.ClusterArgs) { a.VPS.TalosWaitTimeout = "30" }, []string{"vps.talosWaitTimeout"}, "between 1m and 24h"},
		{"wait timeout too short", func(a *vps.ClusterArgs) { a.VPS.TalosWaitTimeout = "30s" }, []string{"vps.talosWaitTimeout"}, ""},
		{"wait timeout too long", func(a *vps.ClusterArgs) { a.VPS.TalosWaitTimeout = "48h" }, []string{"vps.talosWaitTimeout"}, ""},
		{"unknown onDestroy", func(a *vps.ClusterArgs) { a.VPS.OnDestroy = "delete" }, []string{"vps.onDestroy"}, "'forget'"},
		{"no nodes", func(a *vps.ClusterArgs) { a.Nodes = nil }, []string{"nodes"}, "at least one node"},
		{"worker first", func(a *vps.ClusterArgs) { a.Nodes[0], a.Nodes[2] = a.Nodes[2], a.Nodes[0] }, []string{"nodes[0].role"}, "must be a control plane"},
		{"unknown role", func(a *vps.ClusterArgs) { a.Nodes[1].Role = "master" }, []string{"nodes[1].role"}, "not a role"},
		{"name not a DNS label", func(a *vps.ClusterArgs) { a.Nodes[1].Name = "CP_1" }, []string{"nodes[1].name"}, "DNS label"},
		{"name twice", func(a *vps.ClusterArgs) { a.Nodes[2].Name = "cp-0" }, []string{"nodes[2].name"}, "is already the name of nodes[0]"},
		{"ip missing", func(a *vps.ClusterArgs) { a.Nodes[2].IP = "" }, []string{"nodes[2].ip"}, "is required"},
		{"ip not IPv4", func(a *vps.ClusterArgs) { a.Nodes[2].IP = "2001:db8::1" }, []string{"nodes[2].ip"}, "not an IPv4"},
		{"ip twice", func(a *vps.ClusterArgs) { a.Nodes[2].IP = "203.0.113.10" }, []string{"nodes[2].ip"}, "is already the IP of nodes[0]"},
		{"prefix length too long", func(a *vps.ClusterArgs) { a.Nodes[1].PrefixLength = 33 }, []string{"nodes[1].prefixLength"}, "out of range 8-32"},
		{"prefix length too long", func(a *vps.ClusterArgs) { a.Nodes[1].PrefixLength = 33 }, []string{"nodes[1].prefixLength"}, ""},
		{"gateway missing", func(a *vps.ClusterArgs) { a.Nodes[1].Gateway = "" }, []string{"vps.gateway"}, "is required: a node gives no gateway of its own"},
		{"gateway not IPv4", func(a *vps.ClusterArgs) { a.Nodes[1].Gateway = "gw.example.com" }, []string{"nodes[1].gateway"}, "not an IPv4"},
		{"gateway loopback", func(a *vps.ClusterArgs) { a.Nodes[1].Gateway = "127.0.0.1" }, []string{"nodes[1].gateway"}, "loopback"},
		{"gateway is the node", func(a *vps.ClusterArgs) { a.Nodes[1].Gateway = "203.0.113.11" }, []string{"nodes[1].ip"}, "203.0.113.11 is the gateway's address"},
		{"gateway outside the node's network", func(a *vps.ClusterArgs) { a.Nodes[1].PrefixLength = 28 }, []string{"nodes[1].gateway"}, "outside 203.0.113.0/28, the network of nodes[1] (203.0.113.11)"},
		{"default gateway outside a node's network", func(a *vps.ClusterArgs) {
			a.VPS.Gateway, a.Nodes[1].Gateway, a.Nodes[1].PrefixLength = "203.0.113.1", "", 28
			a.Nodes[1].IP = "203.0.113.40"
		}, []string{"vps.gateway"}, "outside 203.0.113.32/28, the network of nodes[1] (203.0.113.40)"},
		{"default prefix length too long", func(a *vps.ClusterArgs) { a.VPS.PrefixLength = 33 }, []string{"vps.prefixLength"}, "out of range 8-32"},
		{"node IP the network address", func(a *vps.ClusterArgs) { a.Nodes[1].IP, a.Nodes[1].PrefixLength = "203.0.113.0", 24 }, []string{"nodes[1].ip"}, "network address of 203.0.113.0/24"},
		{"node IP the broadcast address", func(a *vps.ClusterArgs) { a.Nodes[1].IP, a.Nodes[1].PrefixLength = "203.0.113.255", 24 }, []string{"nodes[1].ip"}, "broadcast address of 203.0.113.0/24"},
		{"a VIP", func(a *vps.ClusterArgs) { a.Cluster.VIP = "203.0.113.50" }, []string{"cluster.vip"}, "layer-2 VIP needs a shared network segment"},
		{"install disk not a device", func(a *vps.ClusterArgs) { a.Nodes[0].InstallDisk = "sda" }, []string{"nodes[0].installDisk"}, "device path"},
		{"install disk with ..", func(a *vps.ClusterArgs) { a.Nodes[0].InstallDisk = "/dev/disk/../sda" }, []string{"nodes[0].installDisk"}, "'..'"},
		{"rescue host not a host", func(a *vps.ClusterArgs) { a.Nodes[0].Rescue.Host = "203.0.113.999" }, []string{"nodes[0].rescue.host"}, "not a host name"},
		{"rescue port out of range", func(a *vps.ClusterArgs) { a.Nodes[0].Rescue.Port = 70000 }, []string{"nodes[0].rescue.port"}, "out of range"},
		{"rescue password missing", func(a *vps.ClusterArgs) { a.Nodes[2].Rescue.Password = nil }, []string{"nodes[2].rescue.password"}, "is required"},
		{"host key a fingerprint", func(a *vps.ClusterArgs) {
			a.Nodes[0].Rescue.HostKey = "SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8"
		}, []string{"nodes[0].rescue.hostKey"}, "not a public key line"},
		{"host key on two lines", func(a *vps.ClusterArgs) { a.Nodes[0].Rescue.HostKey = edKey + "\n" + edKey }, []string{"nodes[0].rescue.hostKey"}, "several lines"},
		{"host key RSA", func(a *vps.ClusterArgs) { a.Nodes[0].Rescue.HostKey = rsaKey }, []string{"nodes[0].rescue.hostKey"}, "RSA"},
		{"every problem at once", func(a *vps.ClusterArgs) {
			a.Cluster.Name = ""
			a.VPS.OnDestroy = "delete"
			a.Nodes[1].Rescue.Port = -1
			a.Nodes[2].Gateway = ""
		}, []string{"cluster.name", "vps.onDestroy", "vps.gateway", "nodes[1].rescue.port"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := validArgs()
			tc.edit(args)

			err := args.Validate("prod")
			var ie *inputs.Error
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, tc.paths, ie.Paths(), "%v", err)
			assert.Contains(t, err.Error(), `invalid arguments of VpsCluster "prod" (nothing was created)`)
			if tc.msg != "" {
				assert.Contains(t, err.Error(), tc.msg)
			}
			assert.NotContains(t, err.Error(), "s3cr3t", "an image URL's query is never echoed")

			e, probed, err := run(t, args)
			require.ErrorAs(t, err, &ie)
			assert.Empty(t, e.All(), "nothing may be registered")
			assert.Empty(t, probed, "no node is probed")
		})
	}
}

func TestValidateNilArgs(t *testing.T) {
	t.Parallel()
	var args *vps.ClusterArgs
	err := args.Validate("prod")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `invalid arguments of VpsCluster "prod"`)
	e, _, err := run(t, nil)
	require.Error(t, err)
	assert.Empty(t, e.All())
}

// A known_hosts-style or commented key line is taken (the command provider
// reads it with ssh.ParseAuthorizedKey), and the explicit defaults are
// accepted.
func TestValidateAcceptsEveryValidSpelling(t *testing.T) {
	t.Parallel()
	args := validArgs()
	args.Schematic = &image.Schematic{ID: strings.Repeat("0a", 32)}
	args.Nodes[0].Rescue.HostKey = "203.0.113.10 " + edKey + " root@rescue"
	args.Nodes[1].InstallDisk = "/dev/disk/by-id/nvme-eui.0025388b91b2c1a4"
	args.Nodes[2].PrefixLength, args.Nodes[2].Gateway = 24, "203.0.113.1"
	args.VPS = servers.Settings{
		AllowedCIDRs: []string{"198.51.100.0/24", "2001:db8::/32"}, PublicTCPPorts: []int{80, 443},
		ImageURL: "https://mirror.example.com/metal-amd64.raw.xz?X-Amz-Signature=abc", RebootCommand: "./flip-boot.sh",
		TalosWaitTimeout: "1h30m", OnDestroy: servers.OnDestroyReset,
	}
	require.NoError(t, args.Validate("prod"))
	args.VPS.OnDestroy = servers.OnDestroyForget
	require.NoError(t, args.Validate("prod"))
}

// onDestroy reset resets every node when its apply goes, and then leaves
// the apply without DeletedWith (which would skip the reset).
func TestResetOnDestroy(t *testing.T) {
	t.Parallel()
	args := validArgs()
	args.VPS.OnDestroy = servers.OnDestroyReset
	e, _, err := run(t, args)
	require.NoError(t, err)
	for _, r := range e.ByType(componentstest.Apply) {
		assert.Empty(t, r.DeletedWith, r.Name)
		// Not on the apply's delete, which a re-image (a replacement of
		// the apply) runs too, wiping the node just installed (item 3 of
		// issue 23): on the membership's removal.
		assert.NotContains(t, r.Inputs, resource.PropertyKey("onDestroy"), r.Name)
	}
	members := 0
	for _, r := range e.ByType(componentstest.LocalCommand) {
		if strings.Contains(r.Name, talos.MemberSuffix) {
			members++
			assert.Equal(t, resource.NewStringProperty("1"), r.Inputs["environment"].ObjectValue()["NODE_RESET"], r.Name)
		}
	}
	assert.Positive(t, members)
	for _, r := range e.ByType(componentstest.Release) {
		assert.True(t, strings.HasSuffix(r.DeletedWith, "::prod-install-cp-0"), "%s: the first install stands for the cluster", r.Name)
	}
}

// A presigned image URL's query is a credential: the installs get the whole
// URL as a secret, and the imageUrl output shows it without the query.
func TestPresignedImageURLStaysSecret(t *testing.T) {
	t.Parallel()
	const base = "https://bucket.example.com/talos/metal-amd64.raw.zst"
	args := validArgs()
	args.VPS.ImageURL = base + "?X-Amz-Signature=s3cr3t"
	e := &componentstest.Engine{}
	// The apply runs in a goroutine of its own, which RunErr does not
	// always wait for: the value comes back over a channel.
	shown := make(chan string, 1)
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		c, err := vps.NewClusterWithDeps(ctx, "prod", args, servers.Deps{Probe: func(context.Context, string) bool { return false }, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
		if err != nil {
			return err
		}
		c.ImageURL.ApplyT(func(u string) string { shown <- u; return u })
		return nil
	}, pulumi.WithMocks("talos-cluster", "test", e))
	require.NoError(t, err)
	select {
	case u := <-shown:
		assert.Equal(t, base, u, "the output leaves the query out")
	case <-time.After(30 * time.Second):
		t.Fatal("the imageUrl output never resolved")
	}
	for _, install := range e.ByType(componentstest.RemoteCommand) {
		stdin := install.Inputs["stdin"]
		require.True(t, stdin.IsSecret(), "%s: the install's stdin holds the signature", install.Name)
		assert.Contains(t, stdin.SecretValue().Element.StringValue(), "X-Amz-Signature=s3cr3t")
	}
}

// What a program may leave out gets the stack file's defaults: SSH as root
// on port 22 to the rescue system, a /32 node network, public resolvers.
func TestVPSDefaults(t *testing.T) {
	t.Parallel()
	a := vps.ClusterArgs{Nodes: []servers.Node{{Name: "node-0", PrefixLength: 29, Rescue: servers.Rescue{User: "admin"}}, {Name: "node-1"}}}
	d := a.WithDefaults()
	assert.Equal(t, []string{"1.1.1.1", "9.9.9.9"}, d.Cluster.Nameservers)
	assert.Equal(t, []int{29, 22}, []int{d.Nodes[0].PrefixLength, d.Nodes[0].Rescue.Port})
	assert.Equal(t, "admin", d.Nodes[0].Rescue.User, "given values stay")
	assert.Equal(t, 32, d.VPS.PrefixLength, "the nodes' default")
	assert.Equal(t, []any{0, 22, "root"}, []any{d.Nodes[1].PrefixLength, d.Nodes[1].Rescue.Port, d.Nodes[1].Rescue.User})
	assert.Nil(t, a.Cluster.Nameservers, "the caller's arguments are not changed")
	assert.Zero(t, a.Nodes[1].Rescue.Port)
}
