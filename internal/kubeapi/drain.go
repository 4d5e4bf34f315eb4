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

	"github.com/fluodata/talos-pulumi/internal/progress"
)

// Defaults of DrainOptions.
const (
	DefaultDrainTimeout = 5 * time.Minute
	DefaultDrainPoll    = 2 * time.Second
)

// DefaultProgressEvery is how often a drain reports what it waits for,
// unless told otherwise (progress.DefaultEvery).
const DefaultProgressEvery = progress.DefaultEvery

// DrainOptions tune Drain; zero values take the defaults.
type DrainOptions struct {
	// Timeout bounds the evictions and the wait for the evicted pods to
	// be gone (default DefaultDrainTimeout).
	Timeout time.Duration
	// Poll is the interval between two rounds of evictions refused for now
	// and checks of the pods still terminating (default DefaultDrainPoll).
	Poll time.Duration
	// SkipWaitForDelete is for a node whose kubelet is gone (the machine
	// is off): only the kubelet confirms that a pod's containers stopped,
	// so the pods evicted from such a node stay terminating until its Node
	// is deleted. The drain then asks each pod's eviction once and waits
	// for none: neither for an evicted pod to be gone, nor for a
	// PodDisruptionBudget to allow an eviction it refuses (the pods of a
	// dead node do not run, waiting protects nothing). DrainWithResult
	// lists the pods it did not wait for. kubectl drain's
	// --skip-wait-for-delete-timeout does the same for pods deleted long
	// enough ago.
	SkipWaitForDelete bool
	// Progress, when set, is told at least every ProgressEvery while the
	// drain runs what it waits for and which pods are left, with the
	// reason of each; it runs on a goroutine of the drain's own, never
	// after the drain returned.
	Progress func(message string)
	// ProgressEvery defaults to DefaultProgressEvery.
	ProgressEvery time.Duration
}

// DrainResult is what a drain did not wait for.
type DrainResult struct {
	// Skipped are the pods a drain with SkipWaitForDelete did not wait
	// for, as "namespace/name (reason)", sorted: evicted and still
	// terminating, or not evicted (a PodDisruptionBudget refused).
	Skipped []string
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
	// skipped: a drain with SkipWaitForDelete does not wait for it.
	skipped bool
	// reason is why the pod is still there, for the timeout's message.
	reason string
}

func (p *drained) String() string { return p.namespace + "/" + p.name }

// Drain empties the node as kubectl drain does: it cordons it, evicts (with
// PodDisruptionBudgets) every pod but DaemonSets', mirror and finished ones,
// unmanaged and emptyDir pods too since the node is going, and waits until they
// are gone. A 429 is retried every opts.Poll until opts.Timeout (ErrDrainTimeout,
// naming the pods left); any other refusal stops it. The node stays cordoned.
func (c *Client) Drain(ctx context.Context, node string, opts DrainOptions) error {
	_, err := c.DrainWithResult(ctx, node, opts)
	return err
}

// DrainWithResult is Drain, and returns the pods it did not wait for
// (DrainOptions.SkipWaitForDelete).
func (c *Client) DrainWithResult(ctx context.Context, node string, opts DrainOptions) (DrainResult, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultDrainTimeout
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultDrainPoll
	}
	p := progress.Start(fmt.Sprintf("the pods of node %q to be evicted", node), opts.Progress, opts.ProgressEvery)
	defer p.Stop()
	if err := c.Cordon(ctx, node); err != nil {
		return DrainResult{}, fmt.Errorf("unable to drain node %q: %w", node, err)
	}
	pods, err := c.podsToEvict(ctx, node)
	if err != nil {
		return DrainResult{}, fmt.Errorf("unable to drain node %q: %w", node, err)
	}
	p.Saw(left(pods, "left"))
	dctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	// stopped turns an error into the drain's own once its time is out or
	// its caller gave up; nil when neither is the case.
	stopped := func() error {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("unable to drain node %q: %s after %s, %s: %w", node, progress.RunStopped(ctx), p.Elapsed(), left(pods, "had not moved"), ctx.Err())
		case dctx.Err() != nil:
			return drainTimeout(node, opts.Timeout, pods)
		}
		return nil
	}
	for {
		n := 0
		for _, pod := range pods {
			if pod.gone || pod.skipped {
				continue
			}
			if !pod.evicted {
				err := c.evict(dctx, pod)
				var apiErr *APIError
				switch {
				case err == nil:
					pod.evicted, pod.reason = true, "still terminating"
				case errors.Is(err, ErrNotFound):
					pod.gone = true
					continue
				case errors.As(err, &apiErr) && apiErr.Code == http.StatusTooManyRequests:
					// An answer without text (its body cut off by the
					// drain's deadline) keeps the reason an earlier one
					// gave: the budget that refuses is the same.
					if apiErr.Message != "" || len(apiErr.Causes) > 0 || !strings.HasPrefix(pod.reason, "blocked") && !strings.HasPrefix(pod.reason, "eviction refused") {
						pod.reason = blockedReason(apiErr)
					}
					if opts.SkipWaitForDelete {
						pod.skipped, pod.reason = true, "not evicted: "+pod.reason
						continue
					}
					n++
					continue
				default:
					if serr := stopped(); serr != nil {
						return DrainResult{}, serr
					}
					return DrainResult{}, fmt.Errorf("unable to drain node %q: unable to evict pod %s: %w", node, pod, err)
				}
			}
			gone, err := c.podGone(dctx, pod)
			if err != nil {
				if serr := stopped(); serr != nil {
					return DrainResult{}, serr
				}
				return DrainResult{}, fmt.Errorf("unable to drain node %q: unable to read pod %s: %w", node, pod, err)
			}
			switch {
			case gone:
				pod.gone = true
			case opts.SkipWaitForDelete:
				pod.skipped, pod.reason = true, "evicted, still terminating"
			default:
				n++
			}
		}
		p.Saw(left(pods, "left"))
		if n == 0 {
			return DrainResult{Skipped: describe(pods, func(p *drained) bool { return p.skipped })}, nil
		}
		select {
		case <-dctx.Done():
			return DrainResult{}, stopped()
		case <-time.After(opts.Poll):
		}
	}
}

// describe lists the pods that match as "namespace/name (reason)",
// sorted.
func describe(pods []*drained, match func(*drained) bool) []string {
	var out []string
	for _, p := range pods {
		if match(p) {
			out = append(out, fmt.Sprintf("%s (%s)", p, p.reason))
		}
	}
	slices.Sort(out)
	return out
}

// left says which pods are not gone yet: "2 pod(s) <verb>: a (reason),
// b (reason)".
func left(pods []*drained, verb string) string {
	stuck := describe(pods, func(p *drained) bool { return !p.gone })
	return fmt.Sprintf("%d pod(s) %s: %s", len(stuck), verb, strings.Join(stuck, ", "))
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
	return fmt.Errorf("unable to drain node %q: %w after %s, %s", node, ErrDrainTimeout, timeout, left(pods, "did not move"))
}
