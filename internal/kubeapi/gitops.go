package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// ApplicationStatus is what ArgoApplication reads of an Argo CD
// Application (argoproj.io/v1alpha1), field by field as Argo CD writes
// them (pkg/apis/application/v1alpha1/types.go).
type ApplicationStatus struct {
	// Sources are spec.source, or spec.sources of a multi-source
	// Application.
	Sources []ApplicationSource
	// Sync is status.sync.status: Synced, OutOfSync or Unknown; empty
	// until the controller has compared the Application.
	Sync string
	// Revision is status.sync.revision, the revision last compared (a
	// commit); Revisions is status.sync.revisions of a multi-source one.
	Revision  string
	Revisions []string
	// Health and HealthMessage are status.health's status (Healthy,
	// Progressing, Degraded, Suspended, Missing, Unknown) and message.
	Health, HealthMessage string
	// OperationPhase and OperationMessage are status.operationState's
	// phase (Running, Terminating, Failed, Error, Succeeded) and message;
	// empty when no operation ever ran.
	OperationPhase, OperationMessage string
	// Resources are status.resources, in Argo CD's order.
	Resources []ApplicationResource
}

// ApplicationSource is one source of an Application.
type ApplicationSource struct {
	// RepoURL, Path, TargetRevision and Chart are the source's repoURL,
	// path, targetRevision and chart.
	RepoURL, Path, TargetRevision, Chart string
}

// ApplicationResource is one resource an Application manages
// (status.resources[]).
type ApplicationResource struct {
	Group, Version, Kind, Namespace, Name string
	// Sync is its status: Synced, OutOfSync or Unknown.
	Sync string
	// Health and HealthMessage are its health's status and message; empty
	// for a kind Argo CD has no health check for (a ConfigMap).
	Health, HealthMessage string
}

// applicationObject is the part of an Application ArgoApplication reads.
type applicationObject struct {
	Spec struct {
		Source  *applicationSourceObject  `json:"source"`
		Sources []applicationSourceObject `json:"sources"`
	} `json:"spec"`
	Status struct {
		Sync struct {
			Status    string   `json:"status"`
			Revision  string   `json:"revision"`
			Revisions []string `json:"revisions"`
		} `json:"sync"`
		Health struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"health"`
		OperationState *struct {
			Phase   string `json:"phase"`
			Message string `json:"message"`
		} `json:"operationState"`
		Resources []struct {
			Group     string `json:"group"`
			Version   string `json:"version"`
			Kind      string `json:"kind"`
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			Status    string `json:"status"`
			Health    *struct {
				Status  string `json:"status"`
				Message string `json:"message"`
			} `json:"health"`
		} `json:"resources"`
	} `json:"status"`
}

type applicationSourceObject struct {
	RepoURL        string `json:"repoURL"`
	Path           string `json:"path"`
	TargetRevision string `json:"targetRevision"`
	Chart          string `json:"chart"`
}

// ArgoApplication reads the Argo CD Application namespace/name. A missing
// Application, or a cluster without Argo CD's CustomResourceDefinition,
// gives an error wrapping ErrNotFound.
func (c *Client) ArgoApplication(ctx context.Context, namespace, name string) (ApplicationStatus, error) {
	path := "/apis/argoproj.io/v1alpha1/namespaces/" + url.PathEscape(namespace) + "/applications/" + url.PathEscape(name)
	var o applicationObject
	if err := c.do(ctx, http.MethodGet, path, nil, "", nil, &o); err != nil {
		return ApplicationStatus{}, fmt.Errorf("unable to read Application %s/%s: %w", namespace, name, err)
	}
	st := o.Status
	a := ApplicationStatus{
		Sync: st.Sync.Status, Revision: st.Sync.Revision, Revisions: st.Sync.Revisions,
		Health: st.Health.Status, HealthMessage: st.Health.Message,
	}
	sources := o.Spec.Sources
	if len(sources) == 0 && o.Spec.Source != nil {
		sources = []applicationSourceObject{*o.Spec.Source}
	}
	for _, s := range sources {
		a.Sources = append(a.Sources, ApplicationSource(s))
	}
	if op := st.OperationState; op != nil {
		a.OperationPhase, a.OperationMessage = op.Phase, op.Message
	}
	for _, r := range st.Resources {
		res := ApplicationResource{Group: r.Group, Version: r.Version, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, Sync: r.Status}
		if r.Health != nil {
			res.Health, res.HealthMessage = r.Health.Status, r.Health.Message
		}
		a.Resources = append(a.Resources, res)
	}
	return a, nil
}
