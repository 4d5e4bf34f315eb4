package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ServerVersion returns the API server's version (its gitVersion,
// "v1.34.1").
func (c *Client) ServerVersion(ctx context.Context) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := c.do(ctx, http.MethodGet, "/version", nil, "", nil, &v); err != nil {
		return "", fmt.Errorf("unable to read server version: %w", err)
	}
	if v.GitVersion == "" {
		return "", errors.New("unable to read server version: the answer has no gitVersion")
	}
	return v.GitVersion, nil
}

// nodeObject is the part of a Node object Nodes reads.
type nodeObject struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Unschedulable bool    `json:"unschedulable"`
		Taints        []Taint `json:"taints"`
	} `json:"spec"`
	Status struct {
		Conditions conditions `json:"conditions"`
		Addresses  []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses"`
		NodeInfo struct {
			KubeletVersion string `json:"kubeletVersion"`
		} `json:"nodeInfo"`
	} `json:"status"`
}

// Nodes lists the cluster's nodes, in the API server's order (by name).
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var list struct {
		Items []nodeObject `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/v1/nodes", nil, "", nil, &list); err != nil {
		return nil, fmt.Errorf("unable to list nodes: %w", err)
	}
	nodes := make([]Node, 0, len(list.Items))
	for _, o := range list.Items {
		n := Node{Name: o.Metadata.Name, KubeletVersion: o.Status.NodeInfo.KubeletVersion, Unschedulable: o.Spec.Unschedulable, Taints: o.Spec.Taints}
		n.Ready = o.Status.Conditions.isTrue("Ready")
		for _, a := range o.Status.Addresses {
			if a.Type == "InternalIP" && n.InternalIP == "" {
				n.InternalIP = a.Address
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// Cordon marks the node unschedulable (a JSON merge patch of
// spec.unschedulable), as kubectl cordon does. A cordoned node stays so.
// A missing node gives an error wrapping ErrNotFound.
func (c *Client) Cordon(ctx context.Context, node string) error {
	path, err := nodePath(node)
	if err == nil {
		patch := map[string]any{"spec": map[string]any{"unschedulable": true}}
		err = c.do(ctx, http.MethodPatch, path, nil, "application/merge-patch+json", patch, nil)
	}
	if err != nil {
		return fmt.Errorf("unable to cordon node %q: %w", node, err)
	}
	return nil
}

// DeleteNode deletes the Node object. A node already gone is success.
// Talos's kubelet registers the node again while it runs: delete it once
// the machine is off or reset.
func (c *Client) DeleteNode(ctx context.Context, node string) error {
	path, err := nodePath(node)
	if err == nil {
		err = c.do(ctx, http.MethodDelete, path, nil, "", nil, nil)
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("unable to delete node %q: %w", node, err)
	}
	return nil
}

func nodePath(node string) (string, error) {
	if node == "" {
		return "", errors.New("no node name given")
	}
	return "/api/v1/nodes/" + url.PathEscape(node), nil
}

func podPath(namespace, name string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods/" + url.PathEscape(name)
}

// maxAnswer bounds the size of an answer read: a list of every pod of a
// large cluster stays well below it.
const maxAnswer = 64 << 20

// do makes one call within the client's timeout: body, if not nil, is sent
// as JSON with contentType; a 2xx answer is decoded into out, if not nil;
// any other answer is an *APIError. A read answered 429 is asked again
// after the answer's Retry-After (a second when it has none), within the
// timeout, as client-go does: kube-apiserver answers 429 "storage is
// (re)initializing" for a moment after a CRD is Established, while the new
// resource's watch cache starts (seen with the real API server).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, contentType string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	for {
		err := c.once(ctx, method, path, query, contentType, body, out)
		var apiErr *APIError
		if method != http.MethodGet || !errors.As(err, &apiErr) || apiErr.Code != http.StatusTooManyRequests {
			return err
		}
		wait := max(apiErr.retryAfter, minRetryWait)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return err // no time left for another: the 429 is the answer
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// once makes one request of a call (see do).
func (c *Client) once(ctx context.Context, method, path string, query url.Values, contentType string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("unable to encode the body of %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	u := c.server + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("unable to prepare %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err // *url.Error: the method, the URL and the cause
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return apiError(method, path, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer)) // lets the connection be reused
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(out); err != nil {
		return fmt.Errorf("unable to decode the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// maxRetryAfter bounds the wait a 429's Retry-After asks for; minRetryWait
// keeps a Retry-After of 0 from asking in a loop.
const (
	maxRetryAfter = 5 * time.Second
	minRetryWait  = 100 * time.Millisecond
)

// apiError reads a Kubernetes Status object from a failed answer; any
// other answer's text becomes the message.
func apiError(method, path string, resp *http.Response) *APIError {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)) // what could be read is the message
	e := &APIError{Method: method, Path: path, Code: resp.StatusCode, retryAfter: time.Second}
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n >= 0 {
		e.retryAfter = min(time.Duration(n)*time.Second, maxRetryAfter)
	}
	var st struct {
		Kind    string `json:"kind"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Details struct {
			Causes []struct {
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"causes"`
		} `json:"details"`
	}
	if json.Unmarshal(raw, &st) == nil && st.Kind == "Status" {
		e.Reason, e.Message = st.Reason, st.Message
		for _, cause := range st.Details.Causes {
			if cause.Message != "" {
				e.Causes = append(e.Causes, cause.Message)
			}
		}
		return e
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	e.Message = msg
	return e
}
