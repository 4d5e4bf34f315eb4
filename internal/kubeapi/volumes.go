package kubeapi

import (
	"context"
	"fmt"
	"net/http"
)

// PersistentVolume is what the tools read of a PersistentVolume: the CSI
// driver and volume handle it names, and the claim bound to it.
type PersistentVolume struct {
	Name, Phase          string
	Driver, VolumeHandle string
	// Claim is "<namespace>/<name>" of the bound claim; "" for none.
	Claim string
}

// PersistentVolumes lists the cluster's PersistentVolumes.
func (c *Client) PersistentVolumes(ctx context.Context) ([]PersistentVolume, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				CSI *struct {
					Driver       string `json:"driver"`
					VolumeHandle string `json:"volumeHandle"`
				} `json:"csi"`
				ClaimRef *struct {
					Namespace string `json:"namespace"`
					Name      string `json:"name"`
				} `json:"claimRef"`
			} `json:"spec"`
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/v1/persistentvolumes", nil, "", nil, &list); err != nil {
		return nil, fmt.Errorf("unable to list persistent volumes: %w", err)
	}
	out := make([]PersistentVolume, 0, len(list.Items))
	for _, o := range list.Items {
		pv := PersistentVolume{Name: o.Metadata.Name, Phase: o.Status.Phase}
		if o.Spec.CSI != nil {
			pv.Driver, pv.VolumeHandle = o.Spec.CSI.Driver, o.Spec.CSI.VolumeHandle
		}
		if o.Spec.ClaimRef != nil {
			pv.Claim = o.Spec.ClaimRef.Namespace + "/" + o.Spec.ClaimRef.Name
		}
		out = append(out, pv)
	}
	return out, nil
}
