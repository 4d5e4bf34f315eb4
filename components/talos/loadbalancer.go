package talos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"go4.org/netipx"
	"golang.org/x/mod/semver"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// LoadBalancer addresses come from Cilium's LB IPAM (CiliumLoadBalancerIPPool,
// cilium.io/v2 in Cilium 1.18) and are answered for on the node network by
// its L2 announcements (CiliumL2AnnouncementPolicy, cilium.io/v2alpha1 only):
// pkg/k8s/apis/cilium.io/client/crds of cilium v1.18.4. Both CRDs are
// registered by cilium-operator once it leads (operator/cmd/root.go,
// pkg/k8s/apis/cell.go), not by the chart: the pools wait for them.
const (
	LBPoolAPIVersion     = "cilium.io/v2"
	LBPoolKind           = "CiliumLoadBalancerIPPool"
	L2PolicyAPIVersion   = "cilium.io/v2alpha1"
	L2PolicyKind         = "CiliumL2AnnouncementPolicy"
	lbPoolCRD            = "ciliumloadbalancerippools.cilium.io"
	l2PolicyCRD          = "ciliuml2announcementpolicies.cilium.io"
	LBPoolsSuffix        = "-lb-pools-ready"
	LBPoolSuffix         = "-lb-pool-"
	L2PolicySuffix       = "-l2-announcement"
	L2PolicyName         = "talos-cluster"
	lbWaitTimeoutSecs    = 600
	LBManagedByLabel     = "app.kubernetes.io/managed-by"
	LBManagedByValue     = "talos-cluster"
	hostnameLabel        = "kubernetes.io/hostname"
	ciliumClientQPS      = 30
	ciliumClientBurst    = 60
	maxPoolsPerCluster   = 32
	maxBlocksPerPool     = 32
	maxServiceLabelPairs = 16
)

// LoadBalancerSettings give Services of type LoadBalancer their addresses:
// Cilium hands them out of the pools and answers ARP for them on the node
// network from one node at a time (L2 announcements).
type LoadBalancerSettings struct {
	// Pools are the address pools.
	Pools []LBPool `pulumi:"pools"`
	// Interfaces are the node interfaces that announce the addresses, as
	// regular expressions (e.g. ^ens[0-9]+: Talos names a Proxmox VM's
	// virtio NIC ens18); every interface Cilium manages when empty.
	Interfaces []string `pulumi:"interfaces,optional"`
	// Nodes are the names of the nodes that may announce the addresses;
	// every node when empty.
	Nodes []string `pulumi:"nodes,optional"`
}

// LBPool is one pool of LoadBalancer addresses.
type LBPool struct {
	// Name is the pool's name (the CiliumLoadBalancerIPPool's): a DNS label.
	Name string `pulumi:"name"`
	// Blocks are the pool's addresses: CIDRs (10.0.0.240/28) or first-last
	// ranges (10.0.0.240-10.0.0.250).
	Blocks []string `pulumi:"blocks"`
	// ServiceSelector limits the pool to the Services with these labels;
	// every Service when empty.
	ServiceSelector map[string]string `pulumi:"serviceSelector,optional"`
	// Routed says the operator's router sends the pool's addresses to the
	// nodes (a static route): the blocks lie outside the node network, where
	// nobody asks for them by ARP (the announcement policy, which selects
	// Services and not pools, still covers their Services).
	Routed bool `pulumi:"routed,optional"`
}

// poolBlock is one block of a pool, parsed.
type poolBlock struct {
	text  string
	r     netipx.IPRange
	where string // input path
}

// parseBlock reads a CIDR or a first-last range of IPv4 addresses.
func parseBlock(s string) (netipx.IPRange, bool, string) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil || !pfx.Addr().Is4() {
			return netipx.IPRange{}, false, fmt.Sprintf("%q is not an IPv4 CIDR like 192.168.1.240/28 or a range like 192.168.1.240-192.168.1.250", s)
		}
		if msg := inputs.HostBitsProblem(s, pfx); msg != "" {
			return netipx.IPRange{}, false, msg
		}
		return netipx.RangeOfPrefix(pfx), true, ""
	}
	r, err := netipx.ParseIPRange(s)
	if err != nil || !r.From().Is4() {
		return netipx.IPRange{}, false, fmt.Sprintf("%q is not an IPv4 CIDR like 192.168.1.240/28 or a range like 192.168.1.240-192.168.1.250 (first-last, the first not after the last)", s)
	}
	return r, false, ""
}

// MinLoadBalancerCilium is the oldest Cilium the load balancer runs on:
// 1.18 serves the pools as cilium.io/v2 (before: v2alpha1), and 1.18.2
// stops reassigning addresses when a pool is widened or the operator
// restarts (Cilium's v1.18.2 release notes), which docs/load-balancer.md
// promises.
const MinLoadBalancerCilium = "1.18.2"

// checkLoadBalancer records the problems of the pools under prefix
// ("cluster.loadBalancer."): each block an IPv4 CIDR or range inside the
// node network (outside it when routed), on none of its reserved addresses
// (the network's own and broadcast, the gateway, the VIP, the nodes), on no
// other pool's; the announcing nodes the cluster's.
func (a *ClusterArgs) checkLoadBalancer(p *inputs.Problems, prefix string) {
	lb := a.Cluster.LoadBalancer
	if lb == nil {
		return
	}
	at := func(path string) string { return prefix + path }
	if len(lb.Pools) == 0 {
		p.Add(at("pools"), "at least one pool is required with the section (leave the section out for none)")
	}
	if c := a.Cluster.Cilium; c != nil && inputs.IsChartVersion(c.Version) && semver.Compare("v"+c.Version, "v"+MinLoadBalancerCilium) < 0 {
		p.Add(strings.TrimSuffix(prefix, "loadBalancer.")+"cilium.version",
			"%s: the load balancer needs Cilium %s or later (the cilium.io/v2 pools came in 1.18, and 1.18.2 keeps every Service's address through a pool change or an operator restart); raise it, or leave cluster.loadBalancer out",
			c.Version, MinLoadBalancerCilium)
	}
	if len(lb.Pools) > maxPoolsPerCluster {
		p.Add(at("pools"), "%d pools: at most %d", len(lb.Pools), maxPoolsPerCluster)
	}
	reserved := a.reservedAddresses()
	names := map[string]string{}
	var seen []poolBlock
	for i, pool := range lb.Pools {
		pp := at(fmt.Sprintf("pools[%d]", i))
		if p.Required(pp+".name", pool.Name) {
			p.DNSLabel(pp+".name", pool.Name)
			if first, dup := names[pool.Name]; dup {
				p.Add(pp+".name", "%q is already the name of %s", pool.Name, first)
			}
			names[pool.Name] = pp
		}
		if len(pool.Blocks) == 0 {
			p.Add(pp+".blocks", "at least one CIDR or range is required")
		}
		if len(pool.Blocks) > maxBlocksPerPool {
			p.Add(pp+".blocks", "%d blocks: at most %d", len(pool.Blocks), maxBlocksPerPool)
		}
		for j, s := range pool.Blocks {
			where := fmt.Sprintf("%s.blocks[%d]", pp, j)
			r, _, msg := parseBlock(s)
			if msg != "" {
				p.Add(where, "%s", msg)
				continue
			}
			b := poolBlock{text: s, r: r, where: where}
			a.checkBlockNetwork(p, b, pool.Routed)
			for _, res := range reserved {
				if r.Contains(res.addr) {
					p.Add(where, "%s holds %s, %s: a LoadBalancer address must be unused", s, res.addr, res.what)
				}
			}
			for _, o := range seen {
				if r.Overlaps(o.r) {
					p.Add(where, "%s overlaps %s (%s): Cilium would hand the same address to two Services", s, o.text, o.where)
				}
			}
			seen = append(seen, b)
		}
		for _, k := range slices.Sorted(maps.Keys(pool.ServiceSelector)) {
			if msg := labelProblem(k, pool.ServiceSelector[k]); msg != "" {
				p.Add(pp+".serviceSelector", "%s", msg)
			}
		}
		if len(pool.ServiceSelector) > maxServiceLabelPairs {
			p.Add(pp+".serviceSelector", "%d labels: at most %d", len(pool.ServiceSelector), maxServiceLabelPairs)
		}
	}
	for i, re := range lb.Interfaces {
		if _, err := regexp.Compile(re); err != nil || re == "" {
			p.Add(at(fmt.Sprintf("interfaces[%d]", i)), "%q is not a regular expression of interface names like ^ens[0-9]+", re)
		}
	}
	nodes := map[string]bool{}
	for _, n := range a.Nodes {
		nodes[n.Name] = true
	}
	for i, n := range lb.Nodes {
		if !nodes[n] {
			p.Add(at(fmt.Sprintf("nodes[%d]", i)), "%q is not a node of the cluster", n)
		}
	}
}

// checkBlockNetwork holds a block to the node network, when the platform
// knows it: inside it, or wholly outside when the pool is routed.
func (a *ClusterArgs) checkBlockNetwork(p *inputs.Problems, b poolBlock, routed bool) {
	net := a.NodeNetwork
	if !net.IsValid() {
		return
	}
	whole := netipx.RangeOfPrefix(net)
	switch {
	case routed && b.r.Overlaps(whole):
		p.Add(b.where, "%s is on the node network %s: a routed pool lies outside it (leave routed out to have the nodes announce it)", b.text, net)
	case !routed && (!whole.Contains(b.r.From()) || !whole.Contains(b.r.To())):
		p.Add(b.where, "%s is not inside the node network %s: the nodes announce a pool's addresses by ARP there (set routed: true for a pool your router sends to the nodes)", b.text, net)
	}
}

// reservedAddress is an address a pool must not hold, and whose it is.
type reservedAddress struct {
	addr netip.Addr
	what string
}

// reservedAddresses are the node network's addresses that are taken.
func (a *ClusterArgs) reservedAddresses() []reservedAddress {
	var out []reservedAddress
	add := func(s, what string) {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, reservedAddress{ip, what})
		}
	}
	if net := a.NodeNetwork; net.IsValid() && net.Bits() < 31 {
		r := netipx.RangeOfPrefix(net)
		out = append(out, reservedAddress{r.From(), "the node network's own address"}, reservedAddress{r.To(), "the node network's broadcast address"})
	}
	if a.NodeGateway.IsValid() {
		out = append(out, reservedAddress{a.NodeGateway, "the nodes' gateway"})
	}
	add(a.Cluster.VIP, "the VIP")
	for i, n := range a.Nodes {
		add(n.IP, fmt.Sprintf("the IP of nodes[%d] (%s)", i, n.Name))
	}
	return out
}

var (
	labelNameRe  = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelValueRe = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
)

// labelProblem says what is wrong with a Kubernetes label, or "".
func labelProblem(k, v string) string {
	switch {
	case !labelNameRe.MatchString(k) || len(k) > 253+1+63:
		return fmt.Sprintf("%q is not a Kubernetes label name", k)
	case !labelValueRe.MatchString(v):
		return fmt.Sprintf("%q (of %s) is not a Kubernetes label value", v, k)
	}
	return ""
}

// LoadBalancerCiliumValues are the Cilium values L2 announcements need
// (Documentation/network/l2-announcements.rst of cilium v1.18.4): the
// feature, and a client rate limit above the chart's 10 QPS / 20 burst
// (values.yaml k8sClientRateLimit), since every announced Service renews a
// lease. kubeProxyReplacement, which they also need, is in CiliumValues.
// None without pools, so a stack without them keeps its values.
func LoadBalancerCiliumValues(lb *LoadBalancerSettings) map[string]any {
	if !lb.announced() {
		return nil
	}
	return map[string]any{
		"l2announcements":    map[string]any{"enabled": true},
		"k8sClientRateLimit": map[string]any{"qps": ciliumClientQPS, "burst": ciliumClientBurst},
	}
}

// announced says that a pool's addresses are announced on the node
// network (a pool that is not routed).
func (lb *LoadBalancerSettings) announced() bool {
	return lb != nil && slices.ContainsFunc(lb.Pools, func(p LBPool) bool { return !p.Routed })
}

// PoolSpec is a pool's CiliumLoadBalancerIPPool spec.
func PoolSpec(pool LBPool) map[string]any {
	blocks := make([]any, 0, len(pool.Blocks))
	for _, s := range pool.Blocks {
		r, cidr, _ := parseBlock(s)
		if cidr {
			blocks = append(blocks, map[string]any{"cidr": s})
		} else {
			blocks = append(blocks, map[string]any{"start": r.From().String(), "stop": r.To().String()})
		}
	}
	spec := map[string]any{"blocks": blocks}
	if len(pool.ServiceSelector) > 0 {
		spec["serviceSelector"] = map[string]any{"matchLabels": stringMap(pool.ServiceSelector)}
	}
	return spec
}

// L2PolicySpec is the CiliumL2AnnouncementPolicy spec: LoadBalancer
// addresses (not external IPs), from the nodes and interfaces given.
func L2PolicySpec(lb *LoadBalancerSettings) map[string]any {
	spec := map[string]any{"loadBalancerIPs": true, "externalIPs": false}
	if len(lb.Interfaces) > 0 {
		spec["interfaces"] = lb.Interfaces
	}
	if len(lb.Nodes) > 0 {
		nodes := slices.Sorted(slices.Values(lb.Nodes))
		spec["nodeSelector"] = map[string]any{"matchExpressions": []any{map[string]any{
			"key": hostnameLabel, "operator": "In", "values": nodes,
		}}}
	}
	return spec
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// poolsJSON is the pools as the guard reads them (POOLS): name, blocks
// as first-last ranges.
func poolsJSON(lb *LoadBalancerSettings) string {
	type pool struct {
		Name   string   `json:"name"`
		Ranges []string `json:"ranges"`
	}
	out := []pool{}
	for _, p := range lb.Pools {
		var ranges []string
		for _, s := range p.Blocks {
			r, _, _ := parseBlock(s)
			ranges = append(ranges, r.String())
		}
		out = append(out, pool{Name: p.Name, Ranges: ranges})
	}
	data, _ := json.Marshal(out)
	return string(data)
}

// loadBalancer registers the pools and the announcement policy after
// Cilium: a wait (and guard) for the CRDs cilium-operator registers, then
// one CiliumLoadBalancerIPPool per pool and one CiliumL2AnnouncementPolicy.
// The guard runs again whenever the pools change, before they are
// updated: it refuses a change that takes from a Service the address
// it holds.
func (b *build) loadBalancer(k8s *kubernetes.Provider, after []pulumi.Resource) ([]pulumi.Resource, error) {
	ctx, name, args := b.ctx, b.name, b.args
	lb := args.Cluster.LoadBalancer
	if lb == nil || len(lb.Pools) == 0 {
		if args.Previous == nil || len(args.Previous.LoadBalancerPools) == 0 {
			return nil, nil
		}
		// The section was removed: its pools go at the end of this run,
		// once the guard, run again for no pool, found no Service that
		// holds one of their addresses.
		lb = &LoadBalancerSettings{}
	}
	pools := poolsJSON(lb)
	guard, err := newKubeWait(ctx, b.deps, name, name+LBPoolsSuffix, kubeWait{
		kubeconfig: b.kubeconfigRaw, waitFor: "pools", timeoutSecs: lbWaitTimeoutSecs,
		env:      pulumi.StringMap{"POOLS": pulumi.String(pools)},
		triggers: pulumi.Array{pulumi.String(pools)},
	}, b.clusterOpts(pulumi.DependsOn(after))...)
	if err != nil {
		return nil, err
	}
	opts := b.clusterOpts(pulumi.Provider(k8s), pulumi.DependsOn([]pulumi.Resource{guard}))
	meta := func(n string) *metav1.ObjectMetaArgs {
		return &metav1.ObjectMetaArgs{Name: pulumi.String(n), Labels: pulumi.StringMap{LBManagedByLabel: pulumi.String(LBManagedByValue)}}
	}
	out := []pulumi.Resource{guard}
	if len(lb.Pools) == 0 {
		return out, nil
	}
	for _, pool := range lb.Pools {
		cr, err := apiextensions.NewCustomResource(ctx, name+LBPoolSuffix+pool.Name, &apiextensions.CustomResourceArgs{
			ApiVersion:  pulumi.String(LBPoolAPIVersion),
			Kind:        pulumi.String(LBPoolKind),
			Metadata:    meta(pool.Name),
			OtherFields: map[string]any{"spec": PoolSpec(pool)},
		}, opts...)
		if err != nil {
			return nil, fmt.Errorf("unable to create load balancer pool %q: %w", pool.Name, err)
		}
		out = append(out, cr)
	}
	if !lb.announced() {
		return out, nil
	}
	policy, err := apiextensions.NewCustomResource(ctx, name+L2PolicySuffix, &apiextensions.CustomResourceArgs{
		ApiVersion:  pulumi.String(L2PolicyAPIVersion),
		Kind:        pulumi.String(L2PolicyKind),
		Metadata:    meta(L2PolicyName),
		OtherFields: map[string]any{"spec": L2PolicySpec(lb)},
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create the L2 announcement policy: %w", err)
	}
	return append(out, policy), nil
}

// guardPool is a pool as POOLS gives it to the guard.
type guardPool struct {
	Name   string   `json:"name"`
	Ranges []string `json:"ranges"`
}

// guardPools is the pools' guard: it waits for the CRDs cilium-operator
// registers, then refuses the new pools (POOLS) when a Service holds an
// address of a pool this cluster made that none of them holds any more:
// Cilium's LB IPAM would take the address from the Service and hand it
// another (operator/pkg/lbipam handlePoolModified, stripOrImportIngresses
// of cilium v1.18.4).
func guardPools(ctx context.Context, client *kubeapi.Client, poolsText string, w kubeapi.Wait, log Logger) error {
	var next []guardPool
	if err := json.Unmarshal([]byte(poolsText), &next); err != nil {
		return fmt.Errorf("unable to read the load balancer pools (POOLS): %w", err)
	}
	w.Report(fmt.Sprintf("waiting up to %s for cilium-operator to register the CRDs of the load balancer pools", w.Timeout))
	if err := client.WaitCRDs(ctx, []string{lbPoolCRD, l2PolicyCRD}, w); err != nil {
		return kubeWaitFailed(err, "look at 'kubectl -n kube-system logs deploy/cilium-operator' (make outputs writes the kubeconfig)")
	}
	live, err := client.IPPools(ctx, LBManagedByLabel+"="+LBManagedByValue)
	if err != nil {
		return err
	}
	held, err := client.LoadBalancerAddresses(ctx)
	if err != nil {
		return err
	}
	if problems := poolChangeProblems(live, next, held); len(problems) > 0 {
		return fmt.Errorf("unable to change the load balancer pools: %s; nothing was changed: keep each address in its pool (of the same name) in cluster.loadBalancer.pools "+
			"until those Services have moved (give them another address with the lbipam.cilium.io/ips annotation, or delete them), then run 'pulumi up' again",
			strings.Join(problems, "; "))
	}
	log.Info(fmt.Sprintf("load balancer pools: %d pools, %d addresses held by Services, none taken away", len(next), len(held)))
	return nil
}

// poolChangeProblems names each address a Service holds that lies in a
// pool live (this cluster's, as the cluster has them) and not in the pool
// of the same name in next. The same name: an address moved to another
// pool (a pool renamed, a block moved) is released by Cilium when its old
// pool changes, and handed out again in whatever order Cilium's LB IPAM
// sees the two pools; the Service may come back with another address.
func poolChangeProblems(live []kubeapi.IPPool, next []guardPool, held []kubeapi.ServiceAddress) []string {
	kept := map[string]*netipx.IPSet{}
	for _, p := range next {
		var b netipx.IPSetBuilder
		for _, s := range p.Ranges {
			if r, err := netipx.ParseIPRange(s); err == nil {
				b.AddRange(r)
			}
		}
		kept[p.Name], _ = b.IPSet()
	}
	var out []string
	for _, a := range held {
		for _, p := range live {
			if !slices.ContainsFunc(p.Ranges, func(r netipx.IPRange) bool { return r.Contains(a.IP) }) {
				continue
			}
			switch set, ok := kept[p.Name]; {
			case !ok:
				out = append(out, fmt.Sprintf("Service %s/%s holds %s of pool %q, which the new pools do not have", a.Namespace, a.Name, a.IP, p.Name))
			case !set.Contains(a.IP):
				out = append(out, fmt.Sprintf("Service %s/%s holds %s of pool %q, which the new pool %q leaves out", a.Namespace, a.Name, a.IP, p.Name, p.Name))
			}
			break
		}
	}
	return out
}

// predictableNICs are names Talos gives NICs on installs of 1.5 and later
// (systemd's predictable names: a Proxmox VM's virtio NIC is ens18);
// legacyNICs the kernel's, which only clusters first installed before 1.5
// keep (net.ifnames=0: Talos's cmd/installer/pkg/install/errata.go).
var (
	predictableNICs = []string{"ens18", "enp0s3", "eno1", "enp1s0f0", "enx0a1b2c3d4e5f"}
	legacyNICs      = []string{"eth0", "eth1"}
)

// LoadBalancerWarnings name each interface regular expression that matches
// the kernel's old names and none of the predictable ones: Cilium takes a
// policy that matches no NIC without complaint, hands the addresses out,
// and nobody answers ARP for them.
func (a *ClusterArgs) LoadBalancerWarnings() []string {
	lb := a.Cluster.LoadBalancer
	if lb == nil {
		return nil
	}
	var out []string
	for i, expr := range lb.Interfaces {
		re, err := regexp.Compile(expr)
		if err != nil {
			continue // a problem of its own
		}
		legacy := slices.ContainsFunc(legacyNICs, re.MatchString)
		if legacy && !slices.ContainsFunc(predictableNICs, re.MatchString) {
			out = append(out, fmt.Sprintf("%s: %q matches the kernel's eth names, not a predictable one like ens18: Talos names NICs predictably on installs of 1.5 and later "+
				"(a Proxmox VM's virtio NIC is ens18), and a policy that matches no NIC announces nothing; leave interfaces out (every NIC Cilium manages) or match the names `talosctl get links` lists",
				a.inputName(fmt.Sprintf("cluster.loadBalancer.interfaces[%d]", i)), expr))
		}
	}
	return out
}
