package talos

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// RegistryMirror sends a registry's image pulls to mirrors first: a
// pull-through cache or a registry on the operator's network.
type RegistryMirror struct {
	// Registry is the registry whose pulls go to the mirrors, as the first
	// part of an image's name (docker.io, ghcr.io, registry.local:5000),
	// or * for every registry.
	Registry string `pulumi:"registry"`
	// Endpoints are the mirrors' URLs (http:// or https://), tried in order.
	Endpoints []string `pulumi:"endpoints"`
	// SkipFallback stops pulls from the registry itself when no mirror has
	// the image.
	SkipFallback bool `pulumi:"skipFallback,optional"`
}

// checkRegistryMirrors records the problems of the mirrors: a registry
// named once, as an image name's first part, each with mirror URLs.
func (c *ClusterSettings) checkRegistryMirrors(p *inputs.Problems, prefix string) {
	seen := map[string]bool{}
	for i, m := range c.RegistryMirrors {
		at := fmt.Sprintf("%sregistryMirrors[%d]", prefix, i)
		switch {
		case m.Registry == "":
			p.Add(at+".registry", "is required, e.g. docker.io (or * for every registry)")
		case m.Registry != "*" && !isRegistryHost(m.Registry):
			p.Add(at+".registry", "%q is not a registry's host[:port] as images name it (docker.io, registry.local:5000)", m.Registry)
		case seen[m.Registry]:
			p.Add(at+".registry", "%s has mirrors above already: list all of its endpoints in one entry", m.Registry)
		}
		seen[m.Registry] = true
		if len(m.Endpoints) == 0 {
			p.Add(at+".endpoints", "is required: the mirrors' URLs, e.g. http://10.5.0.1:5000")
		}
		for j, e := range m.Endpoints {
			if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.Add(fmt.Sprintf("%s.endpoints[%d]", at, j), "%q is not an http:// or https:// URL", e)
			}
		}
	}
}

// isRegistryHost tells whether s is a host[:port] of a registry.
func isRegistryHost(s string) bool {
	host, port, hasPort := strings.Cut(s, ":")
	if hasPort {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	if host == "" {
		return false
	}
	for _, label := range strings.Split(host, ".") {
		if !inputs.IsDNSLabel(strings.ToLower(label)) {
			return false
		}
	}
	return true
}

// RegistryMirrorPatches are the mirrors as Talos takes them: from Talos
// 1.12, one RegistryMirrorConfig document each (the generator's own choice
// past the 1.11 contract: machinery config/generate/registry.go); before,
// machine.registries.mirrors.
func RegistryMirrorPatches(mirrors []RegistryMirror, talosVersion string) []string {
	if len(mirrors) == 0 {
		return nil
	}
	if !atLeast1x(talosVersion, 12) {
		legacy := map[string]legacyMirror{}
		for _, m := range mirrors {
			legacy[m.Registry] = legacyMirror{Endpoints: m.Endpoints, SkipFallback: skipFallback(m)}
		}
		return []string{render(patchDoc{Machine: &machinePatch{Registries: &registriesPatch{Mirrors: legacy}}})}
	}
	out := make([]string, 0, len(mirrors))
	for _, m := range mirrors {
		doc := registryMirrorDoc{APIVersion: "v1alpha1", Kind: "RegistryMirrorConfig", Name: m.Registry, SkipFallback: skipFallback(m)}
		for _, e := range m.Endpoints {
			doc.Endpoints = append(doc.Endpoints, registryEndpoint{URL: e})
		}
		out = append(out, render(doc))
	}
	return out
}

func skipFallback(m RegistryMirror) *bool {
	if !m.SkipFallback {
		return nil
	}
	return &m.SkipFallback
}

type (
	registryMirrorDoc struct {
		APIVersion   string             `yaml:"apiVersion"`
		Kind         string             `yaml:"kind"`
		Name         string             `yaml:"name"`
		Endpoints    []registryEndpoint `yaml:"endpoints"`
		SkipFallback *bool              `yaml:"skipFallback,omitempty"`
	}
	registryEndpoint struct {
		URL string `yaml:"url"`
	}
	registriesPatch struct {
		Mirrors map[string]legacyMirror `yaml:"mirrors"`
	}
	legacyMirror struct {
		Endpoints    []string `yaml:"endpoints"`
		SkipFallback *bool    `yaml:"skipFallback,omitempty"`
	}
)
