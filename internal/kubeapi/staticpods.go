package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// StaticPod is the mirror pod of a static pod: what the API shows of a
// pod the kubelet runs from its own manifest (a control plane's API
// server, controller manager and scheduler on Talos).
type StaticPod struct {
	// Namespace and Name: Name is <component>-<node name>.
	Namespace, Name string
	// Images are its containers' images.
	Images []string
	// Ready is its Ready condition.
	Ready bool
}

// StaticPods returns the mirror pods of the static pods on the node.
func (c *Client) StaticPods(ctx context.Context, node string) ([]StaticPod, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name        string            `json:"name"`
				Namespace   string            `json:"namespace"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Containers []struct {
					Image string `json:"image"`
				} `json:"containers"`
			} `json:"spec"`
			Status struct {
				Conditions conditions `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	q := url.Values{"fieldSelector": {"spec.nodeName=" + node}}
	if err := c.do(ctx, http.MethodGet, "/api/v1/pods", q, "", nil, &list); err != nil {
		return nil, fmt.Errorf("unable to list the pods of node %q: %w", node, err)
	}
	var out []StaticPod
	for _, p := range list.Items {
		if _, mirror := p.Metadata.Annotations[mirrorAnnotation]; !mirror {
			continue
		}
		sp := StaticPod{Namespace: p.Metadata.Namespace, Name: p.Metadata.Name}
		for _, ct := range p.Spec.Containers {
			sp.Images = append(sp.Images, ct.Image)
		}
		sp.Ready = p.Status.Conditions.isTrue("Ready")
		out = append(out, sp)
	}
	return out, nil
}
