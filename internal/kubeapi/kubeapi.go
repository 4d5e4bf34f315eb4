// Package kubeapi is a narrow Kubernetes API client for the day-2
// operations of a Talos cluster: reading the API server's and the nodes'
// versions, and taking a worker out (cordon, drain, delete the Node).
//
// It speaks plain HTTPS and JSON to the API server with the client
// certificate of an admin kubeconfig (the one Talos writes). client-go
// would bring Kubernetes's whole type system and its dependency tree for
// the calls made here: GET /version, the Nodes list, merge patches of
// spec.unschedulable and spec.taints, the Pods of one node, the Eviction
// subresource and DELETE of a Node. Each call has a bounded timeout
// (WithTimeout) and none is retried, except an eviction a
// PodDisruptionBudget refuses for now (HTTP 429), which Drain retries
// until its own timeout, and a taint write that met another (409).
//
// An answer that is not 2xx is an *APIError carrying the HTTP status and
// the message of Kubernetes's Status object; errors.Is matches it against
// ErrNotFound (404) and ErrUnauthorized (401, 403).
package kubeapi

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fluodata/talos-pulumi/internal/certs"
)

// DefaultTimeout bounds one API call unless WithTimeout sets another.
const DefaultTimeout = 30 * time.Second

var (
	// ErrNotFound means the API server answered 404: no such object.
	ErrNotFound = errors.New("not found")
	// ErrUnauthorized means the API server refused the credentials (401)
	// or the user may not make the call (403).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrDrainTimeout means Drain ran out of time with pods still on the
	// node; the error names each with the reason it did not move.
	ErrDrainTimeout = errors.New("drain timed out")
)

// APIError is an answer of the API server that is not 2xx.
type APIError struct {
	// Method and Path are the call's ("PATCH", "/api/v1/nodes/worker-1").
	Method, Path string
	// Code is the HTTP status.
	Code int
	// Reason is the Status object's reason ("NotFound", "TooManyRequests"),
	// empty when the answer was not a Status.
	Reason string
	// Message is the Status object's message, or the answer's text.
	Message string
	// Causes are the messages of the Status object's details.causes (a
	// refused eviction names its PodDisruptionBudget there).
	Causes []string
	// retryAfter is how long a 429 asks the client to wait.
	retryAfter time.Duration
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	if len(e.Causes) > 0 {
		msg += " (" + strings.Join(e.Causes, "; ") + ")"
	}
	return fmt.Sprintf("kubernetes API %s %s: %d %s", e.Method, e.Path, e.Code, msg)
}

// Is matches ErrNotFound for a 404 and ErrUnauthorized for a 401 or 403.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == http.StatusNotFound
	case ErrUnauthorized:
		return e.Code == http.StatusUnauthorized || e.Code == http.StatusForbidden
	}
	return false
}

// conditions are an object's status.conditions.
type conditions []struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// isTrue says the condition of that type is True (the last one of the type,
// as the API server keeps one).
func (cs conditions) isTrue(typ string) bool {
	ok := false
	for _, c := range cs {
		if c.Type == typ {
			ok = c.Status == "True"
		}
	}
	return ok
}

// Node is a Kubernetes Node as the day-2 operations see it.
type Node struct {
	// Name is the Node object's name (the node's hostname on Talos).
	Name string
	// KubeletVersion is status.nodeInfo.kubeletVersion ("v1.34.1").
	KubeletVersion string
	// Ready is true when the node's Ready condition is True.
	Ready bool
	// Unschedulable is spec.unschedulable: the node is cordoned.
	Unschedulable bool
	// InternalIP is the node's first InternalIP address, empty if none.
	InternalIP string
	// Taints are spec.taints (a NoExecute taint's timeAdded not read).
	Taints []Taint
}

// Option configures a Client.
type Option func(*Client)

// WithServer replaces the kubeconfig's server URL ("https://10.0.0.11:6443"):
// to talk to one control plane rather than the endpoint the kubeconfig
// names, or to a test server. The CA and client certificate stay the
// kubeconfig's.
func WithServer(url string) Option {
	return func(c *Client) { c.server = url }
}

// WithTimeout bounds each API call (default DefaultTimeout). Drain's
// overall wait is DrainOptions.Timeout.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = d }
}

// Client calls one Kubernetes API server with an admin client
// certificate. It is safe for concurrent use.
type Client struct {
	server  string
	timeout time.Duration
	http    *http.Client
	kinds   sync.Map // apiVersion/kind: mapping (see mapKind)
}

// New returns a Client for the current context of kubeconfig: its
// cluster's server, CA (certificate-authority-data) and its user's client
// certificate and key (client-certificate-data, client-key-data), inline
// and base64-encoded as Talos writes them. Requests go through the proxy
// of HTTPS_PROXY and NO_PROXY, as kubectl's do.
func New(kubeconfig []byte, opts ...Option) (*Client, error) {
	kc, err := parseKubeconfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("unable to parse kubeconfig: %w", err)
	}
	c := &Client{server: kc.server, timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	if c.server == "" {
		return nil, fmt.Errorf("unable to parse kubeconfig: cluster %q has no server", kc.clusterName)
	}
	u, err := url.Parse(c.server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("unable to use server %q: not an https:// URL", c.server)
	}
	c.server = strings.TrimRight(c.server, "/")
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(kc.ca) {
		return nil, errors.New("unable to parse kubeconfig: certificate-authority-data holds no PEM certificate")
	}
	cert, err := tls.X509KeyPair(kc.cert, kc.key)
	if err != nil {
		return nil, fmt.Errorf("unable to parse kubeconfig: client-certificate-data and client-key-data: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{cert},
		ServerName:   kc.serverName,
		MinVersion:   tls.VersionTLS12,
	}
	c.http = &http.Client{Transport: tr}
	return c, nil
}

// Close releases the Client's idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

// kubeconfig is the part of a kubeconfig New reads.
type kubeconfig struct {
	clusterName     string
	server          string
	serverName      string
	ca, cert, key   []byte
	currentContext  string
	contextUserName string
}

func parseKubeconfig(text []byte) (kubeconfig, error) {
	var doc struct {
		CurrentContext string `yaml:"current-context"`
		Contexts       []struct {
			Name    string `yaml:"name"`
			Context struct {
				Cluster string `yaml:"cluster"`
				User    string `yaml:"user"`
			} `yaml:"context"`
		} `yaml:"contexts"`
		Clusters []struct {
			Name    string `yaml:"name"`
			Cluster struct {
				Server        string `yaml:"server"`
				TLSServerName string `yaml:"tls-server-name"`
				CAData        string `yaml:"certificate-authority-data"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
		Users []struct {
			Name string `yaml:"name"`
			User struct {
				CertData string `yaml:"client-certificate-data"`
				KeyData  string `yaml:"client-key-data"`
			} `yaml:"user"`
		} `yaml:"users"`
	}
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return kubeconfig{}, err
	}
	if doc.CurrentContext == "" {
		return kubeconfig{}, errors.New("current-context is empty")
	}
	kc := kubeconfig{currentContext: doc.CurrentContext}
	found := false
	for _, c := range doc.Contexts {
		if c.Name == doc.CurrentContext {
			kc.clusterName, kc.contextUserName, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		return kubeconfig{}, fmt.Errorf("current-context %q is not among its contexts", doc.CurrentContext)
	}
	found = false
	var caData string
	for _, c := range doc.Clusters {
		if c.Name == kc.clusterName {
			kc.server, kc.serverName, caData, found = c.Cluster.Server, c.Cluster.TLSServerName, c.Cluster.CAData, true
		}
	}
	if !found {
		return kubeconfig{}, fmt.Errorf("cluster %q of context %q is not among its clusters", kc.clusterName, kc.currentContext)
	}
	found = false
	var certData, keyData string
	for _, u := range doc.Users {
		if u.Name == kc.contextUserName {
			certData, keyData, found = u.User.CertData, u.User.KeyData, true
		}
	}
	if !found {
		return kubeconfig{}, fmt.Errorf("user %q of context %q is not among its users", kc.contextUserName, kc.currentContext)
	}
	for _, f := range []struct {
		owner, field, in string
		out              *[]byte
	}{
		{"cluster " + quote(kc.clusterName), "certificate-authority-data", caData, &kc.ca},
		{"user " + quote(kc.contextUserName), "client-certificate-data", certData, &kc.cert},
		{"user " + quote(kc.contextUserName), "client-key-data", keyData, &kc.key},
	} {
		if strings.TrimSpace(f.in) == "" {
			return kubeconfig{}, fmt.Errorf("%s has no %s (only inline, base64 credentials are read)", f.owner, f.field)
		}
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(f.in))
		if err != nil {
			return kubeconfig{}, fmt.Errorf("%s: %s is not base64: %w", f.owner, f.field, err)
		}
		*f.out = b
	}
	return kc, nil
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// ClientCertExpiry is when the client certificate of kubeconfig's current
// context expires: after it, the kubeconfig is refused.
func ClientCertExpiry(kubeconfig []byte) (time.Time, error) {
	kc, err := parseKubeconfig(kubeconfig)
	if err != nil {
		return time.Time{}, fmt.Errorf("unable to parse kubeconfig: %w", err)
	}
	return certs.Expiry(kc.cert)
}
