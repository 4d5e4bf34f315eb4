package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// Taint is one of a Node's spec.taints.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// taintAttempts bounds SetTaints' read-modify-write when another writer
// (the kubelet's status, the node controller's own taints) changes the
// Node in between: each attempt reads it again.
const taintAttempts = 5

// SetTaints makes the Node carry want (by key, with its value and effect)
// and none of the keys in drop, leaving every other taint as it is: those
// of the node controller (not-ready, unreachable) and of other owners. It
// reads the Node and writes spec.taints whole with a merge patch that
// carries the read's resourceVersion, so a Node changed in between is
// answered 409 Conflict (read again) rather than overwritten. Nothing is
// written when the taints are already so.
func (c *Client) SetTaints(ctx context.Context, node string, want []Taint, drop []string) error {
	path, err := nodePath(node)
	for attempt := 1; err == nil; attempt++ {
		err = c.setTaintsOnce(ctx, path, want, drop)
		var apiErr *APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.Code != http.StatusConflict || attempt == taintAttempts {
			break
		}
		err = nil
	}
	if err != nil {
		return fmt.Errorf("unable to set the taints of node %q: %w", node, err)
	}
	return nil
}

func (c *Client) setTaintsOnce(ctx context.Context, path string, want []Taint, drop []string) error {
	var obj struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			Taints []map[string]any `json:"taints"`
		} `json:"spec"`
	}
	if err := c.do(ctx, http.MethodGet, path, nil, "", nil, &obj); err != nil {
		return err
	}
	taints, changed := mergeTaints(obj.Spec.Taints, want, drop)
	if !changed {
		return nil
	}
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": obj.Metadata.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	}
	return c.do(ctx, http.MethodPatch, path, nil, "application/merge-patch+json", patch, nil)
}

// mergeTaints is have with the keys of drop removed, the keys of want
// given want's value and effect in place, and the rest of want after.
// Taints of other owners keep every field (a NoExecute taint's
// timeAdded). changed says the result differs from have.
func mergeTaints(have []map[string]any, want []Taint, drop []string) (out []any, changed bool) {
	placed := map[string]bool{}
	for _, t := range have {
		key, _ := t["key"].(string)
		i := slices.IndexFunc(want, func(w Taint) bool { return w.Key == key })
		switch {
		case i >= 0 && !placed[key]:
			placed[key] = true
			value, _ := t["value"].(string)
			effect, _ := t["effect"].(string)
			changed = changed || value != want[i].Value || effect != want[i].Effect
			out = append(out, want[i])
		case i >= 0 || slices.Contains(drop, key):
			changed = true
		default:
			out = append(out, t)
		}
	}
	for _, w := range want {
		if !placed[w.Key] {
			placed[w.Key] = true
			changed = true
			out = append(out, w)
		}
	}
	return out, changed
}
