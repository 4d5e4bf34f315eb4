// Package realapiserver runs a real kube-apiserver for tests: the binary
// `make kube-apiserver` builds into bin/kube-apiserver (k8s.io/kubernetes
// at the version tools/kube-apiserver/go.mod pins), backed by an embedded
// etcd (go.etcd.io/etcd/server/v3/embed, the etcd 3.6 Talos runs), both on
// 127.0.0.1 ports the kernel picks, in directories of the test's.
//
// The API server is set up as Talos sets up a control plane's
// (internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go
// of Talos v1.13): client certificates of the cluster's Kubernetes CA, no
// anonymous requests, authorization Node,RBAC (so only the group
// system:masters may do everything), the NodeRestriction admission plugin
// beside the default ones, privileged pods allowed, service-account tokens
// signed with a key of its own, TLS 1.2 at least. Nothing else of a
// cluster runs: no kube-controller-manager (no pod garbage collection, no
// disruption controller, no service-account controller), no scheduler, no
// kubelet (a pod deleted on a node stays terminating).
//
// It exists so that kubeapitest's fake is held to the real API server (the
// agreement test, `make e2e-kube`) and for the end-to-end tests of the
// program against a real API server. Without bin/kube-apiserver, Start
// skips the test, saying that `make kube-apiserver` builds it.
package realapiserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/progress"
)

// BinaryEnv names the environment variable that points at another
// kube-apiserver binary than the repository's bin/kube-apiserver.
const BinaryEnv = "KUBE_APISERVER"

// module is the main module's path: its go.mod marks the repository's root,
// where bin/ is.
const module = "github.com/fluodata/talos-pulumi"

// StartTimeout bounds the start of etcd and the API server together: on 2
// cores the API server is ready within seconds, within a minute when they
// are busy with other builds.
var StartTimeout = 3 * time.Minute

// ReportEvery is how often Start says what it waits for (t.Logf).
var ReportEvery = progress.DefaultEvery

// ServiceCIDR is the API server's service-cluster-ip-range (Talos's
// default); its first address is the kubernetes Service's.
const ServiceCIDR = "10.96.0.0/12"

// Binary returns the kube-apiserver to run: $KUBE_APISERVER, or
// bin/kube-apiserver at the repository's root. The error says how to get
// one.
func Binary() (string, error) {
	p, from := os.Getenv(BinaryEnv), "$"+BinaryEnv
	if p == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("unable to find bin/kube-apiserver: %w", err)
		}
		p, from = filepath.Join(root, "bin", "kube-apiserver"), "the repository's"
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no kube-apiserver at %s (%s): `make kube-apiserver` builds bin/kube-apiserver", p, from)
	}
	return p, nil
}

// repoRoot is the nearest folder above the working directory whose go.mod
// is the main module's.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod")) //nolint:gosec // a go.mod above the test's own folder
		if err == nil && bytes.HasPrefix(b, []byte("module "+module+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", module)
		}
		dir = parent
	}
}

// CA is a certificate authority, PEM-encoded: the Kubernetes CA of a Talos
// secrets bundle (certs.k8s) is one.
type CA struct {
	Cert, Key []byte
}

// NewCA makes a throwaway CA (ECDSA P-256, as Talos's Kubernetes CA),
// valid for a day.
func NewCA(t testing.TB) CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes", Organization: []string{"kubernetes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	return CA{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// ClientCert issues a client certificate of the CA for user in groups (the
// certificate's organizations, as the API server reads them), valid for a
// day.
func (ca CA) ClientCert(t testing.TB, user string, groups ...string) (cert, key []byte) {
	t.Helper()
	cert, key, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	must(t, err)
	return cert, key
}

// issue signs tmpl with a new ECDSA P-256 key.
func (ca CA) issue(tmpl *x509.Certificate) (cert, key []byte, err error) {
	caCert, caKey, err := ca.parse()
	if err != nil {
		return nil, nil, err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to generate a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("unable to draw a serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to sign a certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to encode a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// parse reads the CA's certificate and key: a PKCS #8, SEC 1 (EC) or
// PKCS #1 (RSA) key, whatever its PEM block is called (Talos names an
// Ed25519 key's PKCS #8 block "ED25519 PRIVATE KEY").
func (ca CA) parse() (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(ca.Cert)
	if cb == nil {
		return nil, nil, errors.New("unable to parse the CA certificate: no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to parse the CA certificate: %w", err)
	}
	kb, _ := pem.Decode(ca.Key)
	if kb == nil {
		return nil, nil, errors.New("unable to parse the CA key: no PEM block")
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(kb.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			if key, err = x509.ParsePKCS1PrivateKey(kb.Bytes); err != nil {
				return nil, nil, fmt.Errorf("unable to parse the CA key (%s): neither PKCS #8, SEC 1 nor PKCS #1", kb.Type)
			}
		}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("unable to use the CA key: a %T cannot sign", key)
	}
	return cert, signer, nil
}

// Server is a running kube-apiserver with its etcd; both stop at the end
// of the test.
type Server struct {
	t     testing.TB
	url   string
	ca    CA
	admin []byte
	http  *http.Client
	// logFile is the API server's own log (klog), shown when the test
	// fails.
	logFile string
	// namespaces holds the namespaces made ready for pods (ensureNamespace).
	namespaces map[string]bool
	pvsSet     bool
	// host is the address it advertises and its URL names; bind the one
	// it listens on (0.0.0.0 when it answers on more).
	host, bind string
	// What a restart runs again: the port, etcd and files of the first
	// start, and the running process's stop.
	port     int
	etcdURL  string
	files    pki
	args     []string
	mu       sync.Mutex
	stop     func()
	cleanups bool
}

// Options are how a Server's kube-apiserver runs.
type Options struct {
	// Binary is the kube-apiserver to run (Binary() when empty).
	Binary string
	// Args are more flags, e.g. --runtime-config for an API a version
	// serves only on request.
	Args []string
}

// Start starts etcd and the API server with a serving certificate of ca for
// 127.0.0.1 and localhost, and waits until the API server's /readyz answers
// ok, saying what it waits for every 30 s (t.Logf). ctx bounds the start
// alone: cancelled, it stops the wait at once, and the test with it; the
// server, once up, runs until the end of the test. The test is skipped
// when there is no kube-apiserver binary (see Binary).
func Start(ctx context.Context, t testing.TB, ca CA) *Server {
	t.Helper()
	return start(ctx, t, ca, Options{}, "127.0.0.1", 0)
}

// StartAt is Start on a given address (host:port), as a cluster endpoint
// the program's kubeconfig names (https://10.10.0.5:6443): the serving
// certificate is for that host too. The port is taken as it is: a start
// on a taken port fails the test. With more hosts, it answers on every
// local address (as each control plane's API server answers on its own
// address besides the VIP), its URL and advertised address are addr's,
// and its certificate is for the more hosts too.
func StartAt(ctx context.Context, t testing.TB, ca CA, addr string, more ...string) *Server {
	t.Helper()
	return StartAtWith(ctx, t, ca, Options{}, addr, more...)
}

// StartAtWith is StartAt running the kube-apiserver of o.
func StartAtWith(ctx context.Context, t testing.TB, ca CA, o Options, addr string, more ...string) *Server {
	t.Helper()
	host, portText, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil {
		t.Fatalf("realapiserver: %q is not an IP address and port", addr)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 {
		t.Fatalf("realapiserver: %q has no port", addr)
	}
	also := make([]net.IP, 0, len(more))
	for _, h := range more {
		ip := net.ParseIP(h)
		if ip == nil {
			t.Fatalf("realapiserver: %q is not an IP address", h)
		}
		also = append(also, ip)
	}
	return start(ctx, t, ca, o, host, port, also...)
}

// Restart stops the API server and starts the kube-apiserver of o on the
// same port, etcd and certificates, as a control plane's upgrade replaces
// its API server's container: what etcd holds stays. It waits until the
// new one's /readyz answers ok; a failure fails the test.
func (s *Server) Restart(ctx context.Context, o Options) {
	s.t.Helper()
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			s.t.Fatalf("realapiserver: %v", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	s.args = o.Args
	s.logFile = strings.TrimSuffix(s.logFile, ".log") + "-restarted.log"
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	if err := s.run(ctx, bin, s.port, s.etcdURL, s.files); err != nil {
		s.t.Fatalf("realapiserver: unable to restart: %v\n%s", err, tail(s.logFile, 40))
	}
}

// start starts etcd and the API server on host, on port (0: one the
// kernel picks, tried again when someone took it in between); with also,
// on every local address, its certificate for them too.
func start(ctx context.Context, t testing.TB, ca CA, o Options, host string, fixedPort int, also ...net.IP) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skipf("realapiserver: %v", err)
	}
	if o.Binary != "" {
		bin = o.Binary
	}
	if _, _, err := ca.parse(); err != nil {
		t.Fatalf("realapiserver: %v", err)
	}
	dir := t.TempDir()
	etcdURL := startEtcd(ctx, t, filepath.Join(dir, "etcd"))
	files := writePKI(t, ca, dir, append([]net.IP{net.ParseIP(host)}, also...)...)
	adminCert, adminKey := ca.ClientCert(t, "admin", "system:masters")
	s := &Server{t: t, ca: ca, namespaces: map[string]bool{}, host: host, bind: host, etcdURL: etcdURL, files: files, args: o.Args}
	if len(also) > 0 {
		s.bind = "0.0.0.0"
	}
	s.http = httpClient(t, ca.Cert, adminCert, adminKey)
	t.Cleanup(s.http.CloseIdleConnections)

	// The API server takes no listener of ours and refuses port 0: a port
	// the kernel picked is closed and handed on, and taken by someone else
	// in between only rarely, when the start is tried again on another.
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		port := fixedPort
		if port == 0 {
			port = freePort(t, host)
		}
		s.url = "https://" + net.JoinHostPort(host, strconv.Itoa(port))
		s.logFile = filepath.Join(dir, fmt.Sprintf("kube-apiserver-%d.log", attempt))
		s.port = port
		err := s.run(ctx, bin, port, etcdURL, files)
		if err == nil {
			break
		}
		if attempt < 3 && fixedPort == 0 && errors.Is(err, errPortTaken) {
			t.Logf("realapiserver: port %d was taken, trying another", port)
			continue
		}
		t.Fatalf("realapiserver: %v\n%s", err, tail(s.logFile, 40))
	}
	s.admin = kubeapitest.Kubeconfig(s.url, ca.Cert, adminCert, adminKey)
	return s
}

// errPortTaken is the start of an API server whose port someone else
// took.
var errPortTaken = errors.New("the secure port is taken")

// pki is where writePKI put the API server's files.
type pki struct {
	caCert, serverCert, serverKey, saKey, saPub string
}

// writePKI writes the CA's certificate, a serving certificate of the CA
// (for the addresses a client inside or outside a cluster would use) and
// the service-account signing key pair.
func writePKI(t testing.TB, ca CA, dir string, hosts ...net.IP) pki {
	t.Helper()
	serverCert, serverKey, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)}, hosts...),
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	must(t, err)
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	must(t, err)
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	must(t, err)
	p := pki{
		caCert: filepath.Join(dir, "ca.crt"), serverCert: filepath.Join(dir, "apiserver.crt"), serverKey: filepath.Join(dir, "apiserver.key"),
		saKey: filepath.Join(dir, "service-account.key"), saPub: filepath.Join(dir, "service-account.pub"),
	}
	for path, data := range map[string][]byte{
		p.caCert: ca.Cert, p.serverCert: serverCert, p.serverKey: serverKey,
		p.saKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saKeyDER}),
		p.saPub: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
	} {
		must(t, os.WriteFile(path, data, 0o600))
	}
	return p
}

// startEtcd starts an embedded etcd on loopback ports of its own and
// returns its client URL.
func startEtcd(ctx context.Context, t testing.TB, dataDir string) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = dataDir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	peer, _ := url.Parse("http://127.0.0.1:0")
	client, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = cfg.Name + "=http://127.0.0.1:0"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("realapiserver: unable to start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-ctx.Done():
		t.Fatalf("realapiserver: unable to start etcd: %s", progress.RunStopped(ctx))
	case <-time.After(time.Minute):
		t.Fatal("realapiserver: unable to start etcd: not ready within a minute")
	}
	return "http://" + e.Clients[0].Addr().String()
}

// run starts the API server on port and waits for its /readyz. The process
// is stopped at the end of the test, or at once when it does not come up.
func (s *Server) run(ctx context.Context, bin string, port int, etcdURL string, files pki) error {
	t := s.t
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + s.bind,
		"--advertise-address=" + s.host,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + files.serverCert,
		"--tls-private-key-file=" + files.serverKey,
		"--tls-min-version=VersionTLS12",
		"--client-ca-file=" + files.caCert,
		// As Talos: no anonymous requests, Node and RBAC authorizers, the
		// NodeRestriction plugin beside the default ones.
		"--anonymous-auth=false",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--service-account-issuer=" + s.url,
		"--api-audiences=" + s.url,
		"--service-account-key-file=" + files.saPub,
		"--service-account-signing-key-file=" + files.saKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--profiling=false",
		// Only used for certificates it would make itself: none, but
		// never outside the test's directory.
		"--cert-dir=" + filepath.Join(filepath.Dir(files.caCert), "cert-dir"),
	}
	args = append(args, s.args...)
	logFile, err := os.Create(s.logFile)
	if err != nil {
		return fmt.Errorf("unable to create the log file: %w", err)
	}
	cmd := exec.Command(bin, args...) //nolint:gosec // the binary make kube-apiserver built, or the one $KUBE_APISERVER names
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("unable to start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	stop := func() {
		select {
		case <-exited:
			return
		default:
		}
		// SIGTERM lets it close its etcd connections; it has no requests
		// in flight by now.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}

	// The wait ends when the process does.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-exited:
			cancel(errExited)
		case <-wctx.Done():
		}
	}()
	poll := progress.Poll{
		What:     fmt.Sprintf("kube-apiserver at %s to answer /readyz (log: %s)", s.url, s.logFile),
		Interval: 100 * time.Millisecond, Timeout: StartTimeout,
		Report: func(m string) { t.Logf("realapiserver: %s", m) }, Every: ReportEvery,
	}
	err = poll.Until(wctx, func(ctx context.Context) (bool, error) {
		code, body, err := s.call(ctx, http.MethodGet, "/readyz", "", nil)
		if err != nil {
			return false, err
		}
		if code != http.StatusOK {
			return false, fmt.Errorf("/readyz answered %d: %s", code, strings.TrimSpace(string(body)))
		}
		return true, nil
	})
	if err == nil {
		s.stop = stop
		if !s.cleanups {
			s.cleanups = true
			t.Cleanup(func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.stop()
			})
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("realapiserver: the end of kube-apiserver's log:\n%s", tail(s.logFile, 40))
				}
			})
		}
		return nil
	}
	stop()
	if errors.Is(context.Cause(wctx), errExited) {
		if log, _ := os.ReadFile(s.logFile); bytes.Contains(log, []byte("address already in use")) {
			return errPortTaken
		}
		if waitErr == nil {
			waitErr = errors.New("exit status 0")
		}
		return fmt.Errorf("kube-apiserver exited before it was ready: %w", waitErr)
	}
	return fmt.Errorf("unable to start kube-apiserver: %w", err)
}

var errExited = errors.New("kube-apiserver exited")

// freePort is a loopback port the kernel picked, closed again.
func freePort(t testing.TB, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	must(t, ln.Close())
	return port
}

// tail returns the last n lines of a file, for a failure's message.
func tail(path string, n int) string {
	f, err := os.Open(path) //nolint:gosec // the API server's log in the test's directory
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer func() { _ = f.Close() }()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func httpClient(t testing.TB, caPEM, cert, key []byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("realapiserver: the CA certificate is no PEM certificate")
	}
	pair, err := tls.X509KeyPair(cert, key)
	must(t, err)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // loopback only, whatever HTTPS_PROXY says
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// URL is the API server's address ("https://127.0.0.1:PORT").
func (s *Server) URL() string { return s.url }

// CA returns the PEM certificate of the API server's CA.
func (s *Server) CA() []byte { return s.ca.Cert }

// Kubeconfig is an admin kubeconfig (user admin, group system:masters),
// laid out as Talos writes it.
func (s *Server) Kubeconfig() []byte { return s.admin }

// KubeconfigFor is a kubeconfig with a new client certificate of the CA
// for user in groups: RBAC lets such a user read /version, /readyz,
// /livez and /healthz, and nothing else unless bound to a role.
func (s *Server) KubeconfigFor(user string, groups ...string) []byte {
	cert, key := s.ca.ClientCert(s.t, user, groups...)
	return kubeapitest.Kubeconfig(s.url, s.ca.Cert, cert, key)
}

// Call makes one request as the admin: body, when not nil, is sent as JSON
// with contentType (application/json when empty). It returns the HTTP
// status and the answer's body.
func (s *Server) Call(ctx context.Context, method, path, contentType string, body any) (int, []byte, error) {
	return s.call(ctx, method, path, contentType, body)
}

func (s *Server) call(ctx context.Context, method, path, contentType string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("unable to encode the body of %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
		if contentType == "" {
			contentType = "application/json"
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("unable to prepare %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err // *url.Error: the method, the URL and the cause
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("unable to read the answer to %s %s: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// must fails the test on an error that only a broken machine gives.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("realapiserver: %v", err)
	}
}
