package program

import (
	"fmt"
	"net"
	"strconv"
)

// FreeLocalPorts returns, for each preferred port on 127.0.0.1, that port
// when it is free, else one the kernel picks: where a first `up` publishes
// the local cluster's APIs, so that a second local stack or another program
// on 6443 needs no edit. Every port is held until all are chosen, so no two
// come out the same.
func FreeLocalPorts(preferred []int) ([]int, error) {
	out := make([]int, len(preferred))
	for i, port := range preferred {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return nil, fmt.Errorf("unable to find a free port on 127.0.0.1: %w", err)
			}
		}
		defer func() { _ = l.Close() }()
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}

// previousLocalPorts reads the host ports the last run published, by
// node (the container's hostname) and container port, from the
// containers' state (the docker provider's ports output: internal and
// external port).
func previousLocalPorts(resources map[string]any) map[string]map[int]int {
	var ports map[string]map[int]int
	for _, r := range resources {
		m, _ := r.(map[string]any)
		if m["type"] != containerType {
			continue
		}
		out, _ := m["outputs"].(map[string]any)
		node, _ := out["hostname"].(string)
		list, _ := out["ports"].([]any)
		for _, p := range list {
			pm, _ := p.(map[string]any)
			inside, okIn := pm["internal"].(float64)
			outside, okOut := pm["external"].(float64)
			if !okIn || !okOut {
				continue
			}
			if ports == nil {
				ports = map[string]map[int]int{}
			}
			if ports[node] == nil {
				ports[node] = map[int]int{}
			}
			ports[node][int(inside)] = int(outside)
		}
	}
	return ports
}

// containerType is the type of a node's container.
const containerType = "docker:index/container:Container"
