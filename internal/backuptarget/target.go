// Package backuptarget reads a backup target URL (backup.target): the one
// rule of what a target may say, which the stack file's validation checks
// before anything runs and the object store (internal/backupstore) opens.
// It needs nothing but the standard library, so the stack's validation
// does not pull the object store into the program.
package backuptarget

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
)

// QueryKeys are what an s3:// target may say beside the bucket and prefix:
// any other is refused, so that a typo does not silently send backups to
// AWS's default endpoint.
var QueryKeys = []string{"endpoint", "region", "use_path_style"}

// Target is a parsed backup target.
type Target struct {
	// Scheme is "file" or "s3".
	Scheme string
	// Dir is a file target's absolute directory (slash-separated, clean).
	Dir string
	// Bucket and Prefix (without slashes at either end) are an s3
	// target's; Endpoint, Region and PathStyle its parameters.
	Bucket, Prefix, Endpoint, Region string
	PathStyle                        bool
	// Redacted is the URL for messages.
	Redacted string
}

// DefaultRegion is what requests to an S3-compatible store (a target with
// an endpoint) are signed for when the target names no region: the
// default region of MinIO and Ceph's RGW, which most such stores accept.
const DefaultRegion = "us-east-1"

// SigningRegion is the region requests to an s3 target are signed for: the
// one rule of `make backup` and the in-cluster schedule, so that both sign
// alike. The target's region; DefaultRegion for a store with an endpoint
// (not the operator's AWS_REGION, which the cluster does not have); "" for
// AWS without one: `make backup` takes the AWS environment's, and a
// schedule is refused (the cluster has no AWS environment).
func (t Target) SigningRegion() string {
	switch {
	case t.Region != "":
		return t.Region
	case t.Endpoint != "":
		return DefaultRegion
	}
	return ""
}

// Parse reads a target: file:///abs/path (no host but localhost, no
// query), or s3://bucket/prefix?endpoint=https://...&region=...&use_path_style=true.
// An endpoint is https, or plain http on this machine only: the
// credentials and the objects travel over it. Credentials never come in
// the URL, and no message repeats one.
func Parse(target string) (Target, error) {
	u, err := url.Parse(target)
	if err != nil {
		// url.Error repeats the whole URL, which may hold a secret the
		// operator pasted by mistake: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Target{}, fmt.Errorf("unable to parse backup target: %w", err)
	}
	t := Target{Scheme: u.Scheme, Redacted: u.Redacted()}
	if u.User != nil {
		return t, errors.New("credentials do not belong in the URL; give them in the stack's backup.s3 section, or in the AWS environment")
	}
	switch u.Scheme {
	case "file":
		switch {
		case u.Opaque != "" || (u.Host != "" && u.Host != "localhost"):
			return t, fmt.Errorf("a file target names a local directory: file:///absolute/path (three slashes), not host %q", u.Host)
		case u.RawQuery != "":
			return t, errors.New("a file target takes no parameters")
		case !path.IsAbs(u.Path) || path.Clean(u.Path) != strings.TrimSuffix(u.Path, "/") && u.Path != "/":
			return t, fmt.Errorf("%q is not a clean absolute directory: file:///absolute/path, e.g. file:///var/backups/talos", u.Path)
		}
		t.Dir = path.Clean(u.Path)
	case "s3":
		if u.Host == "" {
			return t, errors.New("names no bucket: an S3 target is s3://bucket/prefix")
		}
		t.Bucket, t.Prefix = u.Host, strings.Trim(u.Path, "/")
		if err := t.readQuery(u.RawQuery); err != nil {
			return t, err
		}
	default:
		return t, fmt.Errorf("scheme %q is not file or s3: the scheme must be file:// or s3://", u.Scheme)
	}
	return t, nil
}

// readQuery reads an s3 target's parameters.
func (t *Target) readQuery(raw string) error {
	q, err := url.ParseQuery(raw)
	if err != nil {
		// u.Query would drop a malformed pair, and with it maybe the
		// endpoint: backups would go to AWS instead of the intended server.
		return fmt.Errorf("unable to parse the parameters: %w", err)
	}
	for k := range q {
		if !slices.Contains(QueryKeys, k) {
			return fmt.Errorf("unknown parameter %q (known: %s)", k, strings.Join(QueryKeys, ", "))
		}
	}
	t.Endpoint, t.Region = q.Get("endpoint"), q.Get("region")
	if t.Endpoint != "" {
		if msg := EndpointProblem(t.Endpoint); msg != "" {
			return errors.New(msg)
		}
	}
	if v := q.Get("use_path_style"); v != "" {
		if t.PathStyle, err = strconv.ParseBool(v); err != nil {
			return fmt.Errorf("unable to parse use_path_style %q: true or false", v)
		}
	}
	return nil
}

// EndpointProblem says what is wrong with an S3 endpoint, or "".
func EndpointProblem(endpoint string) string {
	e, err := url.Parse(endpoint)
	switch {
	case err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "":
		return fmt.Sprintf("the endpoint %q is not an http:// or https:// URL", endpoint)
	case e.Scheme == "http" && !isLoopback(e.Hostname()):
		return fmt.Sprintf("the endpoint %q uses plain http, which sends the credentials in clear; use https (http only for a store on this machine)", endpoint)
	}
	return ""
}

func isLoopback(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().IsLoopback()
	}
	return host == "localhost"
}
