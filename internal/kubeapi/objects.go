package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// APIResource is a resource at one version of its API group, written as
// kubectl and client-go's schema.ParseResourceArg read it:
// <plural>.<version>.<group> ("podsecuritypolicies.v1beta1.policy"), or
// <plural>.<version> for the core group ("pods.v1").
type APIResource string

// parts splits the resource into its plural, version and group, as
// ParseResourceArg's first form does (k8s.io/apimachinery v0.35
// pkg/runtime/schema/group_version.go).
func (r APIResource) parts() (resource, version, group string, ok bool) {
	resource, rest, found := strings.Cut(string(r), ".")
	if !found || resource == "" {
		return "", "", "", false
	}
	version, group, _ = strings.Cut(rest, ".")
	return resource, version, group, version != ""
}

// ListPath is the resource's list path across namespaces.
func (r APIResource) ListPath() (string, error) {
	resource, version, group, ok := r.parts()
	if !ok {
		return "", fmt.Errorf("%q is not <plural>.<version>.<group>", string(r))
	}
	if group == "" {
		return "/api/" + url.PathEscape(version) + "/" + url.PathEscape(resource), nil
	}
	return "/apis/" + url.PathEscape(group) + "/" + url.PathEscape(version) + "/" + url.PathEscape(resource), nil
}

// ObjectRef names one object: its namespace ("" when cluster-scoped) and
// name.
type ObjectRef struct {
	Namespace, Name string
}

func (o ObjectRef) String() string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// Objects lists up to limit objects of the resource, across namespaces
// (enough to name them; no continuation is followed). A resource the API
// server does not serve answers 404: an error wrapping ErrNotFound, as
// upstream's removed-API check takes it (go-kubernetes v0.2.28
// kubernetes/upgrade/checks.go, PopulateRemovedAPIResources).
func (c *Client) Objects(ctx context.Context, r APIResource, limit int) ([]ObjectRef, error) {
	path, err := r.ListPath()
	var list struct {
		Items []struct {
			Metadata struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err == nil {
		err = c.do(ctx, http.MethodGet, path, url.Values{"limit": {strconv.Itoa(limit)}}, "", nil, &list)
	}
	if err != nil {
		return nil, fmt.Errorf("unable to list the objects of %s: %w", r, err)
	}
	out := make([]ObjectRef, 0, len(list.Items))
	for _, o := range list.Items {
		out = append(out, ObjectRef{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name})
	}
	return out, nil
}
