package proxmox

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// proxmoxProvider uses the caller's proxmoxve provider when opts pass one, else
// one of the component's own (<name>-pve) made from the proxmox inputs, so that
// nothing depends on ambient proxmoxve:* config. A caller's endpoint must be
// proxmox.endpoint, which the component's own calls use. Switching between the
// two replaces nothing (docs/decisions/0004-upstream-behaviours.md#switching-proxmox-providers-replaces-nothing).
func (c *Cluster) proxmoxProvider(ctx *pulumi.Context, name string, px HostSettings, opts []pulumi.ResourceOption, parent pulumi.ResourceOption) ([]pulumi.ResourceOption, error) {
	if caller := callerProvider(opts); caller != nil {
		c.Provider = caller
		check := caller.Endpoint.ApplyT(func(endpoint *string) ([]pulumi.Resource, error) {
			if endpoint != nil && *endpoint != "" && !sameEndpoint(*endpoint, px.Endpoint) {
				return nil, fmt.Errorf("unable to use the proxmoxve provider passed to ProxmoxCluster %q: its endpoint %s is not proxmox.endpoint %s, "+
					"which the component's own API calls use: give both the same Proxmox VE API", name, *endpoint, px.Endpoint)
			}
			return nil, nil
		}).(pulumi.ResourceArrayOutput)
		return []pulumi.ResourceOption{parent, pulumi.Provider(caller), pulumi.DependsOnInputs(check)}, nil
	}
	own, err := newProvider(ctx, name+"-pve", px, parent)
	if err != nil {
		return nil, err
	}
	c.Provider = own
	return []pulumi.ResourceOption{parent, pulumi.Provider(own)}, nil
}

// hostProvider is proxmoxProvider for the proxmox input's host, and for a
// hosts entry a provider of the component's own (<name>-pve-<host>) made
// from the entry's settings: a caller's provider serves one API, the
// proxmox input's.
func (c *Cluster) hostProvider(ctx *pulumi.Context, name string, host hostView, opts []pulumi.ResourceOption, parent pulumi.ResourceOption) ([]pulumi.ResourceOption, error) {
	if host.Name == "" {
		return c.proxmoxProvider(ctx, name, host.Settings, opts, parent)
	}
	own, err := newProvider(ctx, name+"-pve"+host.suffix(), host.Settings, parent)
	if err != nil {
		return nil, err
	}
	c.HostProviders[host.Name] = own
	return []pulumi.ResourceOption{parent, pulumi.Provider(own)}, nil
}

// newProvider is a proxmoxve provider for the host's API, its token a
// secret from the inputs to the provider.
func newProvider(ctx *pulumi.Context, name string, px HostSettings, parent pulumi.ResourceOption) (*proxmoxve.Provider, error) {
	own, err := proxmoxve.NewProvider(ctx, name, &proxmoxve.ProviderArgs{
		Endpoint: pulumi.String(px.Endpoint),
		ApiToken: pulumi.ToSecret(px.APITokenSecret.ToStringOutput().ApplyT(func(s string) string {
			return px.APITokenID + "=" + s
		})).(pulumi.StringOutput),
		Insecure: pulumi.Bool(px.Insecure),
	}, parent)
	if err != nil {
		return nil, fmt.Errorf("unable to create Proxmox provider %s: %w", name, err)
	}
	return own, nil
}

// callerProvider is the proxmoxve provider among the component's options,
// or nil. The SDK rehydrates a provider passed to a component of the
// package as the proxmoxve SDK's type (its package is registered).
func callerProvider(opts []pulumi.ResourceOption) *proxmoxve.Provider {
	o, err := pulumi.NewResourceOptions(opts...)
	if err != nil {
		return nil
	}
	if p, ok := o.Provider.(*proxmoxve.Provider); ok {
		return p
	}
	for _, p := range o.Providers {
		if p, ok := p.(*proxmoxve.Provider); ok {
			return p
		}
	}
	return nil
}

// sameEndpoint tells whether two API URLs name the same API: scheme, host
// and port compared without case, trailing slashes ignored.
func sameEndpoint(a, b string) bool {
	ua, errA := url.Parse(strings.TrimSpace(a))
	ub, errB := url.Parse(strings.TrimSpace(b))
	if errA != nil || errB != nil {
		return strings.EqualFold(strings.TrimSuffix(a, "/"), strings.TrimSuffix(b, "/"))
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host) &&
		strings.TrimRight(ua.Path, "/") == strings.TrimRight(ub.Path, "/")
}
