package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"go4.org/netipx"
)

// WaitCRDs waits until every CustomResourceDefinition named (plural.group)
// exists with its Established condition True: an operator that registers
// its CRDs at startup (cilium-operator) does so after its Deployment is
// ready.
func (c *Client) WaitCRDs(ctx context.Context, names []string, w Wait) error {
	what := fmt.Sprintf("the CRDs %s (%s)", strings.Join(names, ", "), c.server)
	var refused error
	err := w.poll(what).Until(ctx, func(ctx context.Context) (bool, error) {
		var missing []string
		for _, n := range names {
			var crd struct {
				Status struct {
					Conditions conditions `json:"conditions"`
				} `json:"status"`
			}
			err := c.do(ctx, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+url.PathEscape(n), nil, "", nil, &crd)
			if errors.Is(err, ErrNotFound) {
				missing = append(missing, n+" (not registered yet)")
				continue
			}
			if err != nil {
				if refused = c.refusal(err); refused != nil {
					return true, nil //nolint:nilerr // the refusal is in refused
				}
				return false, err
			}
			if !crd.Status.Conditions.isTrue("Established") {
				missing = append(missing, n+" (not established yet)")
			}
		}
		if len(missing) == 0 {
			return true, nil
		}
		return false, errors.New("waiting for " + strings.Join(missing, ", "))
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return fmt.Errorf("unable to wait for %s: %w", what, err)
	}
	return nil
}

// IPPool is a CiliumLoadBalancerIPPool as the pools' guard reads it.
type IPPool struct {
	Name   string
	Ranges []netipx.IPRange
}

// IPPools lists the CiliumLoadBalancerIPPools (cilium.io/v2) with the
// label selector given; none when the CRD is not there.
func (c *Client) IPPools(ctx context.Context, selector string) ([]IPPool, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Blocks []struct {
					CIDR  string `json:"cidr"`
					Start string `json:"start"`
					Stop  string `json:"stop"`
				} `json:"blocks"`
			} `json:"spec"`
		} `json:"items"`
	}
	err := c.do(ctx, http.MethodGet, "/apis/cilium.io/v2/ciliumloadbalancerippools", url.Values{"labelSelector": {selector}}, "", nil, &list)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("unable to list the load balancer pools: %w", err)
	}
	out := make([]IPPool, 0, len(list.Items))
	for _, it := range list.Items {
		p := IPPool{Name: it.Metadata.Name}
		for _, b := range it.Spec.Blocks {
			if pfx, err := netip.ParsePrefix(b.CIDR); err == nil {
				p.Ranges = append(p.Ranges, netipx.RangeOfPrefix(pfx))
				continue
			}
			// Cilium takes a block of start alone as that one address
			// (lbipam: stop defaults to start).
			from, err := netip.ParseAddr(b.Start)
			if err != nil {
				continue
			}
			to := from
			if s, err := netip.ParseAddr(b.Stop); err == nil {
				to = s
			}
			p.Ranges = append(p.Ranges, netipx.IPRangeFrom(from, to))
		}
		out = append(out, p)
	}
	return out, nil
}

// ServiceAddress is an address a Service of type LoadBalancer holds.
type ServiceAddress struct {
	Namespace, Name string
	IP              netip.Addr
}

// LoadBalancerAddresses lists the addresses the Services of type
// LoadBalancer hold (status.loadBalancer.ingress[].ip).
func (c *Client) LoadBalancerAddresses(ctx context.Context) ([]ServiceAddress, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Spec struct {
				Type string `json:"type"`
			} `json:"spec"`
			Status struct {
				LoadBalancer struct {
					Ingress []struct {
						IP string `json:"ip"`
					} `json:"ingress"`
				} `json:"loadBalancer"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/v1/services", nil, "", nil, &list); err != nil {
		return nil, fmt.Errorf("unable to list the services: %w", err)
	}
	var out []ServiceAddress
	for _, s := range list.Items {
		if s.Spec.Type != "LoadBalancer" {
			continue
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(in.IP); err == nil {
				out = append(out, ServiceAddress{Namespace: s.Metadata.Namespace, Name: s.Metadata.Name, IP: ip})
			}
		}
	}
	return out, nil
}
