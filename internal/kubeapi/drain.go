package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Defaults of DrainOptions.
const (
	DefaultDrainTimeout = 5 * time.Minute
	DefaultDrainPoll    = 2 * time.Second
)

// DrainOptions tune Drain; zero values take the defaults.
type DrainOptions struct {
	// Timeout bounds the evictions and the wait for the evicted pods to
	// be gone (default DefaultDrainTimeout).
	Timeout time.Duration
	// Poll is the interval between two rounds of evictions refused for now
	// and checks of the pods still terminating (default DefaultDrainPoll).
	Poll time.Duration
}

// mirrorAnnotation marks a static pod's mirror pod: the kubelet runs the
// pod from its own manifest, the API cannot evict it.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// podObject is the part of a Pod object Drain reads.
type podObject struct {
	Metadata struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		UID             string            `json:"uid"`
		Annotations     map[string]string `json:"annotations"`
		OwnerReferences []ownerReference  `json:"ownerReferences"`
	} `json:"metadata"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

type ownerReference struct {
	Kind string `json:"kind"`
}

// drained is a pod Drain moves.
type drained struct {
	namespace, name, uid string
	evicted, gone        bool
	// reason is why the pod is still there, for the timeout's message.
	reason string
}

func (p *drained) String() string { return p.namespace + "/" + p.name }

// Drain empties the node as kubectl drain does: it cordons the node, then
// evicts (the Eviction API, which honours PodDisruptionBudgets) every pod
// on it but those of DaemonSets, mirror pods of static pods and pods that
// have finished, and waits until the evicted pods are gone (deleted, or
// replaced by a pod of the same name and another UID). Pods without a
// controller and pods with emptyDir volumes are evicted too: the node is
// being removed.
//
// An eviction a PodDisruptionBudget refuses for now (HTTP 429) is retried
// every opts.Poll; a pod already gone (404) is fine. When opts.Timeout runs
// out first, the error wraps ErrDrainTimeout and names every pod that did
// not move (namespace/name) with the reason. Any other refusal stops the
// drain at once. The node stays cordoned in every case.
func (c *Client) Drain(ctx context.Context, node string, opts DrainOptions) error {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultDrainTimeout
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultDrainPoll
	}
	if err := c.Cordon(ctx, node); err != nil {
		return fmt.Errorf("unable to drain node %q: %w", node, err)
	}
	pods, err := c.podsToEvict(ctx, node)
	if err != nil {
		return fmt.Errorf("unable to drain node %q: %w", node, err)
	}
	dctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	// stopped turns an error into the drain's own once its time is out or
	// its caller gave up; nil when neither is the case.
	stopped := func(err error) error {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("unable to drain node %q: %w", node, err)
		case dctx.Err() != nil:
			return drainTimeout(node, opts.Timeout, pods)
		}
		return nil
	}
	for {
		left := 0
		for _, p := range pods {
			if p.gone {
				continue
			}
			if !p.evicted {
				err := c.evict(dctx, p)
				var apiErr *APIError
				switch {
				case err == nil:
					p.evicted, p.reason = true, "still terminating"
				case errors.Is(err, ErrNotFound):
					p.gone = true
					continue
				case errors.As(err, &apiErr) && apiErr.Code == http.StatusTooManyRequests:
					p.reason = blockedReason(apiErr)
					left++
					continue
				default:
					if serr := stopped(err); serr != nil {
						return serr
					}
					return fmt.Errorf("unable to drain node %q: unable to evict pod %s: %w", node, p, err)
				}
			}
			gone, err := c.podGone(dctx, p)
			if err != nil {
				if serr := stopped(err); serr != nil {
					return serr
				}
				return fmt.Errorf("unable to drain node %q: unable to read pod %s: %w", node, p, err)
			}
			if gone {
				p.gone = true
				continue
			}
			left++
		}
		if left == 0 {
			return nil
		}
		select {
		case <-dctx.Done():
			return stopped(dctx.Err())
		case <-time.After(opts.Poll):
		}
	}
}

// podsToEvict lists the pods on the node that Drain evicts.
func (c *Client) podsToEvict(ctx context.Context, node string) ([]*drained, error) {
	var list struct {
		Items []podObject `json:"items"`
	}
	q := url.Values{"fieldSelector": {"spec.nodeName=" + node}}
	if err := c.do(ctx, http.MethodGet, "/api/v1/pods", q, "", nil, &list); err != nil {
		return nil, fmt.Errorf("unable to list pods of node %q: %w", node, err)
	}
	var pods []*drained
	for _, o := range list.Items {
		if o.Status.Phase == "Succeeded" || o.Status.Phase == "Failed" {
			continue
		}
		if _, mirror := o.Metadata.Annotations[mirrorAnnotation]; mirror {
			continue
		}
		if slices.ContainsFunc(o.Metadata.OwnerReferences, func(r ownerReference) bool { return r.Kind == "DaemonSet" }) {
			continue
		}
		pods = append(pods, &drained{namespace: o.Metadata.Namespace, name: o.Metadata.Name, uid: o.Metadata.UID, reason: "not evicted yet"})
	}
	return pods, nil
}

// evict posts the pod's Eviction.
func (c *Client) evict(ctx context.Context, p *drained) error {
	eviction := map[string]any{
		"apiVersion": "policy/v1",
		"kind":       "Eviction",
		"metadata":   map[string]string{"name": p.name, "namespace": p.namespace},
	}
	return c.do(ctx, http.MethodPost, podPath(p.namespace, p.name)+"/eviction", nil, "application/json", eviction, nil)
}

// podGone reports whether the evicted pod is gone: deleted, or replaced by
// a pod of the same name (a StatefulSet's) with another UID.
func (c *Client) podGone(ctx context.Context, p *drained) (bool, error) {
	var o podObject
	err := c.do(ctx, http.MethodGet, podPath(p.namespace, p.name), nil, "", nil, &o)
	if errors.Is(err, ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return o.Metadata.UID != p.uid, nil
}

// blockedReason says why an eviction was answered 429: a
// PodDisruptionBudget (the API names it in the Status's causes), or the
// API server's own rate limits.
func blockedReason(e *APIError) string {
	text := strings.TrimSpace(strings.Join(append([]string{e.Message}, e.Causes...), " "))
	if strings.Contains(strings.ToLower(text), "disruption budget") {
		return "blocked by a PodDisruptionBudget: " + text
	}
	return "eviction refused for now (429): " + text
}

func drainTimeout(node string, timeout time.Duration, pods []*drained) error {
	var stuck []string
	for _, p := range pods {
		if !p.gone {
			stuck = append(stuck, fmt.Sprintf("%s (%s)", p, p.reason))
		}
	}
	slices.Sort(stuck)
	return fmt.Errorf("unable to drain node %q: %w after %s, %d pod(s) did not move: %s",
		node, ErrDrainTimeout, timeout, len(stuck), strings.Join(stuck, ", "))
}
