// Command standin stands in for the Talos image in the tests with the real
// Docker daemon, which can pull no image here and refuses privileged
// containers: a static binary, the entrypoint of a root file system
// imported with `docker import`. What it shares with Talos is what the
// tests look at: it runs as the container's first process with a read-only
// root, counts its boots in /var (a state volume: the count survives a
// new container), listens on the Talos API's and the Kubernetes API's
// ports, and stops on SIGTERM. It serves neither API.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
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
	if err := os.WriteFile("/var/boots", []byte(fmt.Sprint(n+1)), 0o600); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	for _, p := range []string{":50000", ":6443"} {
		l, err := net.Listen("tcp", p)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
