// Package pveapi is a narrow Proxmox VE API client: only the calls this
// project makes outside the Pulumi provider (the doctor's checks, and the
// hard stop before a VM is deleted).
//
// Why not a library: luthermonson/go-proxmox covers far more of the API but
// retries nothing, has no not-found sentinel and reads a VM's config on every
// lookup; bpg's client lives in the provider's internal packages. A dozen
// calls behind an interface are easier to make safe (per-call timeouts,
// retries on transient errors only) and to fake in tests.
package pveapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// ErrNotFound is returned when the node, VM or task does not exist. Proxmox
// answers a missing VM with 500 "Configuration file ... does not exist"
// rather than 404; both map here.
var ErrNotFound = errors.New("not found")

// APIError is an HTTP error answer of the API.
type APIError struct {
	Method, Path string
	Status       int
	Message      string
	// Errors is Proxmox's per-parameter reason of a 400 "Parameter
	// verification failed.", keyed by parameter name.
	Errors map[string]string
}

// RejectsParam reports whether the API refused the call because of the named
// parameter: a 400 whose per-parameter errors name it. Proxmox checks
// parameters before it starts any task, so nothing was done.
func (e *APIError) RejectsParam(name string) bool {
	_, named := e.Errors[name]
	return e.Status == http.StatusBadRequest && named
}

func (e *APIError) Error() string {
	return fmt.Sprintf("proxmox API %s %s: %d %s", e.Method, e.Path, e.Status, e.Message)
}

// Transient reports whether retrying may help: 5xx except a missing VM.
func (e *APIError) Transient() bool { return e.Status >= 500 && !isMissing(e.Message) }

func isMissing(msg string) bool {
	return strings.Contains(msg, "does not exist") || strings.Contains(msg, "no such VM")
}

// Options tune the client; zero values take the defaults.
type Options struct {
	// Insecure skips TLS verification (a self-signed certificate).
	Insecure bool
	// CallTimeout bounds one HTTP call (default 15 s).
	CallTimeout time.Duration
	// Retries is how often a transient failure is retried (default 3).
	Retries int
	// Backoff is the first wait between retries, doubled each time
	// (default 500 ms).
	Backoff time.Duration
	// HTTPClient replaces the transport (tests); Insecure is then ignored.
	HTTPClient *http.Client
}

// Client talks to one Proxmox VE API endpoint with an API token.
type Client struct {
	base    string
	auth    string
	http    *http.Client
	timeout time.Duration
	retries int
	backoff time.Duration
}

// New returns a client for endpoint (https://host:8006/) and an API token
// (id user@realm!name, secret UUID).
func New(endpoint, tokenID, tokenSecret string, o Options) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("proxmox API: %q is not a URL like https://pve:8006/", endpoint)
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/api2/json"
	hc := o.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// The operator opts into this per stack (proxmox.insecure).
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: o.Insecure, MinVersion: tls.VersionTLS12} //nolint:gosec // opt-in per stack
		hc = &http.Client{Transport: tr}
	}
	c := &Client{
		base: u.String(), auth: "PVEAPIToken=" + tokenID + "=" + tokenSecret, http: hc,
		timeout: o.CallTimeout, retries: o.Retries, backoff: o.Backoff,
	}
	if c.timeout == 0 {
		c.timeout = 15 * time.Second
	}
	if c.retries == 0 {
		c.retries = 3
	}
	if c.backoff == 0 {
		c.backoff = 500 * time.Millisecond
	}
	return c, nil
}

// call performs one API call with retries on transient failures (5xx other
// than a missing object, connection errors) and none on 4xx. out receives
// the "data" member of the answer.
func (c *Client) call(ctx context.Context, method, path string, form url.Values, out any) error {
	wait := c.backoff
	var err error
	for attempt := 0; ; attempt++ {
		err = c.once(ctx, method, path, form, out)
		if err == nil || !transient(err) || attempt >= c.retries {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unable to retry the Proxmox API call (%s %s): %w (last error: %w)", method, path, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func transient(err error) bool {
	var api *APIError
	if errors.As(err, &api) {
		return api.Transient()
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// An untrusted certificate stays untrusted.
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "connection reset")
}

func (c *Client) once(ctx context.Context, method, path string, form url.Values, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("unable to prepare the Proxmox API call (%s %s): %w", method, path, err)
	}
	req.Header.Set("Authorization", c.auth)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("unable to call the Proxmox API (%s %s): %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("unable to read the Proxmox API answer (%s %s): %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		msg, perParam := errorMessage(resp, raw)
		apiErr := &APIError{Method: method, Path: path, Status: resp.StatusCode, Message: msg, Errors: perParam}
		if resp.StatusCode == http.StatusNotFound || isMissing(apiErr.Message) {
			return fmt.Errorf("%w: %w", ErrNotFound, apiErr)
		}
		return apiErr
	}
	if out == nil {
		return nil
	}
	var envelope struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &envelope); err != nil {
		return fmt.Errorf("unable to decode the Proxmox API answer (%s %s) as JSON: %w", method, path, err)
	}
	if err := json.Unmarshal(envelope.Data, out); err != nil {
		return fmt.Errorf("unable to decode the Proxmox API answer (%s %s) into the expected data: %w", method, path, err)
	}
	return nil
}

// errorMessage is Proxmox's reason: the status line carries it, the body may
// add a "message" or per-parameter "errors" (returned too, and appended to the
// message in name order so that the text is the same on every run).
func errorMessage(resp *http.Response, body []byte) (string, map[string]string) {
	var e struct {
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	msg := strings.TrimSpace(strings.TrimPrefix(resp.Status, fmt.Sprint(resp.StatusCode)))
	if json.Unmarshal(body, &e) == nil {
		if e.Message != "" {
			msg = strings.TrimSpace(e.Message)
		}
		for _, k := range slices.Sorted(maps.Keys(e.Errors)) {
			msg += fmt.Sprintf("; %s: %s", k, strings.TrimSpace(e.Errors[k]))
		}
	} else if s := strings.TrimSpace(string(body)); s != "" && len(s) < 300 {
		msg = s
	}
	return msg, e.Errors
}
