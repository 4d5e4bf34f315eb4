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

// Defaults of DrainOptions: kubectl drain's intervals (k8s.io/kubectl
// v0.37.2): pkg/drain/drain.go:359 checks every second whether an evicted
// pod is gone, pkg/cmd/drain/drain.go:155 asks again 5 s after an
// eviction refused for now (429). kubectl's own timeout is none.
const (
	DefaultDrainTimeout = 5 * time.Minute
	DefaultDrainPoll    = time.Second
	DefaultEvictRetry   = 5 * time.Second
)

// DefaultProgressEvery is how often a drain reports what it waits for,
// unless told otherwise (progress.DefaultEvery).
const DefaultProgressEvery = progress.DefaultEvery

// DrainOptions tune Drain; zero values take the defaults.
type DrainOptions struct {
	// Timeout bounds the evictions and the wait for the evicted pods to
	// be gone (default DefaultDrainTimeout).
	Timeout time.Duration
	// Poll is the interval between two checks of the pods still
	// terminating (default DefaultDrainPoll).
	Poll time.Duration
	// EvictRetry is how long after an eviction refused for now (a
	// PodDisruptionBudget's 429, a namespace being deleted) the pod's
	// eviction is asked again: DefaultEvictRetry, kubectl's, when neither
	// it nor Poll is set; Poll when only Poll is (one interval for both,
	// as before EvictRetry existed).
	EvictRetry time.Duration
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
	// terminating, or not evicted (refused for now: a
	// PodDisruptionBudget, a namespace being deleted).
	Skipped []string
}

// mirrorAnnotation marks a static pod's mirror pod: the kubelet runs the
// pod from its own manifest, the API cannot evict it.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// podObject is the part of a Pod object Drain reads.
type podObject struct {
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               string            `json:"uid"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
		Annotations       map[string]string `json:"annotations"`
		OwnerReferences   []ownerReference  `json:"ownerReferences"`
	} `json:"metadata"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

type ownerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Controller *bool  `json:"controller"`
}

// controller is the pod's controller: its first owner reference marked
// controller, as metav1.GetControllerOf reads it; nil when none is.
func (o *podObject) controller() *ownerReference {
	for i, r := range o.Metadata.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return &o.Metadata.OwnerReferences[i]
		}
	}
	return nil
}

// finished says the pod's containers ended for good (Succeeded, Failed).
func (o *podObject) finished() bool {
	return o.Status.Phase == "Succeeded" || o.Status.Phase == "Failed"
}

// drained is a pod Drain moves.
type drained struct {
	namespace, name, uid string
	// deleting: its metadata.deletionTimestamp was set when last read.
	deleting      bool
	evicted, gone bool
	// skipped: a drain with SkipWaitForDelete does not wait for it.
	skipped bool
	// failed is why the drain gave up on it (a refusal other than one for
	// now): it goes on with the others, as kubectl does, and fails at
	// their end.
	failed error
	// retryAt is when an eviction refused for now is asked again.
	retryAt time.Time
	// reason is why the pod is still there, for the timeout's message.
	reason string
}

func (p *drained) String() string { return p.namespace + "/" + p.name }

// Drain empties the node as `kubectl drain --ignore-daemonsets
// --delete-emptydir-data --force` (k8s.io/kubectl v0.37.2, pkg/drain) does
// and Talos's upgrade drain: it cordons it, evicts (with
// PodDisruptionBudgets, each pod's own grace period) every pod but the
// mirror pods and the unfinished pods of a DaemonSet that exists, unmanaged
// and emptyDir pods too since the node is going, and waits until they are
// gone. An eviction refused for now (429, or 403 in a namespace being
// deleted) is asked again every opts.EvictRetry until opts.Timeout
// (ErrDrainTimeout, naming the pods left); any other refusal fails the
// drain once the other pods are gone. The node stays cordoned.
func (c *Client) Drain(ctx context.Context, node string, opts DrainOptions) error {
	_, err := c.DrainWithResult(ctx, node, opts)
	return err
}

// DrainWithResult is Drain, and returns the pods it did not wait for
// (DrainOptions.SkipWaitForDelete).
func (c *Client) DrainWithResult(ctx context.Context, node string, opts DrainOptions) (DrainResult, error) {
	if opts.EvictRetry <= 0 {
		opts.EvictRetry = DefaultEvictRetry
		if opts.Poll > 0 {
			opts.EvictRetry = opts.Poll
		}
	}
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
			if pod.gone || pod.skipped || pod.failed != nil {
				continue
			}
			if !pod.evicted {
				if time.Now().Before(pod.retryAt) {
					n++
					continue
				}
				if !pod.retryAt.IsZero() {
					// kubectl reads the pod again before it asks again
					// (pkg/drain/drain.go:346-350): a pod of the same name
					// (a StatefulSet's) is the one then evicted and waited
					// for, one being deleted meanwhile is waited for.
					c.refresh(dctx, pod)
				}
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
					n += pod.refusedForNow(opts)
					continue
				case errors.As(err, &apiErr) && namespaceTerminating(apiErr, pod.namespace):
					// As kubectl (pkg/drain/drain.go:330-340): a pod
					// already being deleted is waited for, another is
					// asked again until the namespace's deletion deletes
					// it.
					if !pod.deleting {
						pod.reason = "eviction refused for now: namespace " + pod.namespace + " is being deleted"
						n += pod.refusedForNow(opts)
						continue
					}
					pod.evicted, pod.reason = true, "still terminating"
				default:
					if serr := stopped(); serr != nil {
						return DrainResult{}, serr
					}
					pod.failed, pod.reason = fmt.Errorf("unable to evict pod %s: %w", pod, err), "eviction failed"
					continue
				}
			}
			gone, err := c.podGone(dctx, pod)
			if err != nil {
				if serr := stopped(); serr != nil {
					return DrainResult{}, serr
				}
				pod.failed, pod.reason = fmt.Errorf("unable to read pod %s: %w", pod, err), "evicted, unable to read"
				continue
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
			// As kubectl (pkg/drain/drain.go:378-389): the pods whose
			// eviction failed fail the drain once the others are done.
			var failed []error
			for _, pod := range pods {
				if pod.failed != nil {
					failed = append(failed, pod.failed)
				}
			}
			if len(failed) > 0 {
				return DrainResult{}, fmt.Errorf("unable to drain node %q: %w", node, errors.Join(failed...))
			}
			return DrainResult{Skipped: describe(pods, func(p *drained) bool { return p.skipped })}, nil
		}
		select {
		case <-dctx.Done():
			return DrainResult{}, stopped()
		case <-time.After(opts.Poll):
		}
	}
}

// refusedForNow handles an eviction refused for now (pod.reason says
// why): a drain that waits for nothing skips the pod, another asks again
// after opts.EvictRetry. It returns how many pods the drain still waits
// for because of it (0 or 1).
func (p *drained) refusedForNow(opts DrainOptions) int {
	if opts.SkipWaitForDelete {
		p.skipped, p.reason = true, "not evicted: "+p.reason
		return 0
	}
	p.retryAt = time.Now().Add(opts.EvictRetry)
	return 1
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

// PodsToEvict lists, as "namespace/name" in the API server's order, the
// pods on the node that Drain evicts: those kubectl's
// drain.Helper{Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData:
// true, GracePeriodSeconds: -1}.GetPodsForDeletion returns (k8s.io/kubectl
// v0.37.2; tools/drainparity holds it to that on the real kube-apiserver).
func (c *Client) PodsToEvict(ctx context.Context, node string) ([]string, error) {
	pods, err := c.podsToEvict(ctx, node)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.String())
	}
	return names, nil
}

// podsToEvict lists the pods on the node that Drain evicts, with kubectl's
// filters (k8s.io/kubectl v0.37.2 pkg/drain/filters.go:152-161, in their
// order) under --ignore-daemonsets --delete-emptydir-data --force: a pod
// already being deleted is evicted too (skipDeletedFilter, :252-263, skips
// none without --skip-wait-for-delete-timeout); a DaemonSet's is not
// (daemonSetFilter, :179-209), but when it finished or its DaemonSet is
// gone; a mirror pod is not (mirrorPodFilter, :211-216), even finished;
// emptyDir and unmanaged pods are (localStorageFilter and
// unreplicatedFilter, :218-250, let them go with these flags). A DaemonSet
// that cannot be read fails the drain before any eviction, as kubectl's.
func (c *Client) podsToEvict(ctx context.Context, node string) ([]*drained, error) {
	var list struct {
		Items []podObject `json:"items"`
	}
	q := url.Values{"fieldSelector": {"spec.nodeName=" + node}}
	if err := c.do(ctx, http.MethodGet, "/api/v1/pods", q, "", nil, &list); err != nil {
		return nil, fmt.Errorf("unable to list pods of node %q: %w", node, err)
	}
	// daemonSets says, by namespace/name, whether a DaemonSet exists: read
	// once per drain.
	daemonSets := map[string]bool{}
	var pods []*drained
	for _, o := range list.Items {
		// filters.go:173-177: a DaemonSet of apps/v1, the pod's controller
		// (filters.go:186), not any owner of that kind.
		if ref := o.controller(); ref != nil && ref.Kind == "DaemonSet" && ref.APIVersion == "apps/v1" && !o.finished() {
			key := o.Metadata.Namespace + "/" + ref.Name
			exists, read := daemonSets[key]
			if !read {
				var err error
				exists, err = c.daemonSetExists(ctx, o.Metadata.Namespace, ref.Name)
				if err != nil {
					return nil, fmt.Errorf("unable to tell whether pod %s/%s is a DaemonSet's: %w", o.Metadata.Namespace, o.Metadata.Name, err)
				}
				daemonSets[key] = exists
			}
			if exists {
				continue
			}
		}
		if _, mirror := o.Metadata.Annotations[mirrorAnnotation]; mirror {
			continue
		}
		pods = append(pods, &drained{
			namespace: o.Metadata.Namespace, name: o.Metadata.Name, uid: o.Metadata.UID,
			deleting: o.Metadata.DeletionTimestamp != "", reason: "not evicted yet",
		})
	}
	return pods, nil
}

// daemonSetExists reads the DaemonSet (apps/v1): false when it is not
// found.
func (c *Client) daemonSetExists(ctx context.Context, namespace, name string) (bool, error) {
	path := "/apis/apps/v1/namespaces/" + url.PathEscape(namespace) + "/daemonsets/" + url.PathEscape(name)
	err := c.do(ctx, http.MethodGet, path, nil, "", nil, nil)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// evict posts the pod's Eviction, with the DeleteOptions kubectl sends for
// --grace-period=-1 (pkg/drain/drain.go:135-166): none set, so that the
// pod's own terminationGracePeriodSeconds applies.
func (c *Client) evict(ctx context.Context, p *drained) error {
	eviction := map[string]any{
		"apiVersion":    "policy/v1",
		"kind":          "Eviction",
		"metadata":      map[string]string{"name": p.name, "namespace": p.namespace},
		"deleteOptions": map[string]any{},
	}
	return c.do(ctx, http.MethodPost, podPath(p.namespace, p.name)+"/eviction", nil, "application/json", eviction, nil)
}

// refresh reads the pod again: its UID and whether it is being deleted.
// An error leaves them as they were (the eviction that follows tells).
func (c *Client) refresh(ctx context.Context, p *drained) {
	var o podObject
	if err := c.do(ctx, http.MethodGet, podPath(p.namespace, p.name), nil, "", nil, &o); err == nil {
		p.uid, p.deleting = o.Metadata.UID, o.Metadata.DeletionTimestamp != ""
	}
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

// namespaceTerminating says the eviction was refused because the pod's
// namespace is being deleted: 403 with the cause the NamespaceLifecycle
// admission plugin gives (k8s.io/apiserver
// pkg/admission/plugin/namespace/lifecycle/admission.go, cause
// NamespaceTerminating, whose message is read here: APIError keeps the
// causes' messages).
func namespaceTerminating(e *APIError, namespace string) bool {
	return e.Code == http.StatusForbidden && slices.Contains(e.Causes, "namespace "+namespace+" is being terminated")
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
