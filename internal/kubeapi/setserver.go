package kubeapi

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// SetServer returns the kubeconfig with the server of its current
// context's cluster replaced: for a cluster this machine reaches through a
// published port rather than at the endpoint the nodes use. Everything else
// (the CA, the credentials, the other entries) is kept as it was.
func SetServer(text []byte, server string) ([]byte, error) {
	kc, err := parseKubeconfig(text)
	if err != nil {
		return nil, fmt.Errorf("unable to read the kubeconfig: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, fmt.Errorf("unable to read the kubeconfig: %w", err)
	}
	done := false
	for _, c := range seq(field(root(&doc), "clusters")) {
		if scalar(field(c, "name")) != kc.clusterName {
			continue
		}
		if s := field(field(c, "cluster"), "server"); s != nil {
			s.Value, done = server, true
		}
	}
	if !done {
		return nil, errors.New("unable to set the kubeconfig's server: its cluster has none")
	}
	return yaml.Marshal(&doc)
}

// root is a document's top mapping.
func root(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0]
	}
	return doc
}

// field is a mapping's value at key, or nil.
func field(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// seq is a sequence's items (none for anything else).
func seq(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

// scalar is a scalar's value ("" for anything else).
func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}
