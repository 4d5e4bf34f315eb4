// Command standin stands in for the Talos image in the tests with the real
// Docker daemon, which can pull no image here and refuses privileged
// containers: a static binary, the entrypoint of a root file system
// imported with `docker import`. What it shares with Talos is what the
// tests look at: it runs as the container's first process with a read-only
// root, counts its boots in /var (a state volume: the count survives a new
// container), answers on the Talos API's and the Kubernetes API's ports,
// and stops on SIGTERM.
//
// It serves neither API itself: it relays both to the test's host, the
// container network's gateway, where the test runs the project's Talos API
// fake and a real kube-apiserver for the node, and tells the host when it
// starts ("up <boots>": 1 on new volumes, a new machine) and stops
// ("down"): the fake node boots and goes down with it.
package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The host's ports for a node whose address ends in n: its Talos API at
// TalosBase+n, its Kubernetes API at KubernetesBase+n, and where it says
// "up" and "down" at NoticeBase+n. The e2e test listens there.
const (
	TalosBase      = 40000
	KubernetesBase = 41000
	NoticeBase     = 42000
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-boots" {
		b, _ := os.ReadFile("/var/boots")
		fmt.Println(string(b))
		return
	}
	b, _ := os.ReadFile("/var/boots")
	n := 0
	_, _ = fmt.Sscan(string(b), &n)
	if err := os.WriteFile("/var/boots", []byte(strconv.Itoa(n+1)), 0o600); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	host, last := hostAndLastByte()
	for port, base := range map[int]int{50000: TalosBase, 6443: KubernetesBase} {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		go relay(l, net.JoinHostPort(host, strconv.Itoa(base+last)))
	}
	notice := net.JoinHostPort(host, strconv.Itoa(NoticeBase+last))
	tell(notice, "up "+strconv.Itoa(n+1))
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
	tell(notice, "down")
}

// relay copies every connection to l to and from upstream; one that
// cannot reach it is closed.
func relay(l net.Listener, upstream string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			u, err := net.DialTimeout("tcp", upstream, 2*time.Second)
			if err != nil {
				return
			}
			defer func() { _ = u.Close() }()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
			<-done
		}()
	}
}

// tell sends what to the host, when it listens.
func tell(addr, what string) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return
	}
	_, _ = c.Write([]byte(what + "\n"))
	_ = c.Close()
}

// hostAndLastByte are the default gateway (the host) and the last byte of
// the container's own IPv4 address.
func hostAndLastByte() (string, int) {
	gw, _ := defaultGateway()
	last := 0
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			last = int(ipn.IP.To4()[3])
			break
		}
	}
	return gw, last
}

// defaultGateway reads the default route's gateway from /proc/net/route
// (little-endian hex).
func defaultGateway() (string, error) {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "00000000" {
			continue
		}
		raw, err := hex.DecodeString(f[2])
		if err != nil || len(raw) != 4 {
			continue
		}
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, binary.LittleEndian.Uint32(raw))
		return ip.String(), nil
	}
	return "", errors.New("no default route")
}
