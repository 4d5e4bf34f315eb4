package stacks_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/stacks"
)

// Keys made with ssh-keygen; the fingerprints are what `ssh-keygen -lf`
// printed for them, so the parser is checked against OpenSSH's own output.
const (
	pveKeyBlob    = "AAAAC3NzaC1lZDI1NTE5AAAAILLv5oo8Hld2lK72k/SU05828UX0FPhpCEGBq4aMEq1x"
	pveKeyFP      = "SHA256:TZHf4tcs4TQSKKLuBdVb2DX6/kqA1De8TPSHhlcTMd8"
	ecdsaHostKey  = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBPBxhssZvigBZ79ePOuHpIMd0pRRXL5mZ3RQbS/jISp0c0BjIhtr9ZNFNNA2hEXGilCxQ70ldVIRKlh3/9dGu/Y="
	ecdsaHostFP   = "SHA256:bIWCLVW3v5+Z+3s3hgA7+lgvpQtuIAkKVaBopMW7iwI"
	rsaHostKey    = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCWAntkuii7tb39PMK8ZpU4zPCz9DA/p65gwmgMmgTA3GTnX9JYU+BLOWmxaLLeJP5r8qc/MpebVvzZMV1PU7bFNBmArc164BVjjPorlW4WlWh6RDhQT82uqalibkv1Mn2yBBAMnWP/amyiCwpi8l4Cns0AqY0HOJdlSopn74i6Zqe5Pt6F4fSIHyBhHd2bQXKUMSz1Ys3eS6pF1LeoNZQ0FDJry6VeTRXwBMIoclTeIlvgjx/2CukI5+gtPi/5WUaduQTKibr/ts0vqSxJXRTkPYSi4c5Pj0mBfAIk5kQ9W9jbL7PrsI0hZp0M7y893NE5Jk+AeJRtuTMqKVcLQbcz"
	rsaHostFP     = "SHA256:o1orMs3+R1AlDZ5i4yZcPAJG3uP0Rx8QtNoLH+/Y5F4"
	rescueKeyFP   = "SHA256:DFP+ClXfOO+qces4CkuGU0VOmwGRFetv18DJKTH0Ar4"
	pveAuthorized = "ssh-ed25519 " + pveKeyBlob
)

func TestParseHostKeyForms(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		in        string
		fp        string
		key       string // AuthorizedKey(); "" for a fingerprint pin
		hosts     []string
		wantTypes string
	}{
		"authorized_keys line with comment": {pveHostKey, pveKeyFP, pveAuthorized, nil, ssh.KeyAlgoED25519},
		"no comment, spaces around":         {"  " + pveAuthorized + "\t", pveKeyFP, pveAuthorized, nil, ssh.KeyAlgoED25519},
		"ssh-keyscan output":                {"192.168.122.70 " + pveAuthorized, pveKeyFP, pveAuthorized, []string{"192.168.122.70"}, ssh.KeyAlgoED25519},
		"known_hosts, names and a port":     {"pve.lan,[192.168.122.70]:2222 " + pveHostKey, pveKeyFP, pveAuthorized, []string{"pve.lan", "[192.168.122.70]:2222"}, ssh.KeyAlgoED25519},
		"hashed known_hosts":                {"|1|F1E1KeoE/eEWhi10WpGv4OdiO6Y=|3988QV0VE8wmZL7suNrYQLITLCg= " + pveAuthorized, pveKeyFP, pveAuthorized, []string{"|1|F1E1KeoE/eEWhi10WpGv4OdiO6Y=|3988QV0VE8wmZL7suNrYQLITLCg="}, ssh.KeyAlgoED25519},
		"ecdsa":                             {ecdsaHostKey, ecdsaHostFP, ecdsaHostKey, nil, ssh.KeyAlgoECDSA256},
		"rsa":                               {rsaHostKey, rsaHostFP, rsaHostKey, nil, ssh.KeyAlgoRSA},
		"fingerprint":                       {pveKeyFP, pveKeyFP, "", nil, ""},
		"fingerprint with padding":          {pveKeyFP + "=", pveKeyFP, "", nil, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pin, err := stacks.ParseHostKey(c.in)
			require.NoError(t, err)
			assert.True(t, pin.IsSet())
			assert.Equal(t, c.fp, pin.Fingerprint)
			assert.Equal(t, c.key, pin.AuthorizedKey())
			assert.Equal(t, c.hosts, pin.Hosts)
			if c.wantTypes != "" {
				assert.Equal(t, c.wantTypes, pin.Key.Type())
			} else {
				assert.Nil(t, pin.Key)
			}
		})
	}

	pin, err := stacks.ParseHostKey("")
	require.NoError(t, err)
	assert.False(t, pin.IsSet(), "empty: nothing pinned")
}

func TestParseHostKeyRefuses(t *testing.T) {
	t.Parallel()
	cert := hostCertificate(t)
	cases := map[string]struct{ in, want string }{
		"garbage":               {"not a key", `"not a key" is neither a public key line`},
		"blob cut short":        {"ssh-ed25519 " + pveKeyBlob[:40], "is neither a public key line"},
		"type and blob differ":  {"ssh-rsa " + pveKeyBlob, "is neither a public key line"},
		"blob alone":            {pveKeyBlob, "is neither a public key line"},
		"ssh-keygen -l line":    {"256 " + pveKeyFP + " root@pve (ED25519)", "is neither a public key line"},
		"short fingerprint":     {"SHA256:TZHf4tcs4TQSKKLuBdVb2DX6", "is not a SHA256 fingerprint"},
		"fingerprint not b64":   {"SHA256:" + strings.Repeat("!", 43), "is not a SHA256 fingerprint"},
		"MD5 fingerprint":       {"MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", "is an MD5 fingerprint"},
		"bare MD5 fingerprint":  {"16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", "is an MD5 fingerprint"},
		"two lines":             {pveHostKey + "\n" + ecdsaHostKey, "holds several lines"},
		"cert-authority marker": {"@cert-authority *.lan " + pveAuthorized, "markers like @cert-authority are not supported"},
		"revoked marker":        {"@revoked * " + pveAuthorized, "markers like @revoked are not supported"},
		"host certificate":      {cert, "is a host certificate"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := stacks.ParseHostKey(c.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// hostCertificate is an ed25519 host certificate line.
func hostCertificate(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	_, caKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	ca, err := ssh.NewSignerFromKey(caKey)
	require.NoError(t, err)
	key, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	cert := &ssh.Certificate{Key: key, CertType: ssh.HostCert, ValidBefore: ssh.CertTimeInfinity}
	require.NoError(t, cert.SignCert(rand.Reader, ca))
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert)))
}

func TestHostKeyMatches(t *testing.T) {
	t.Parallel()
	pve, _, _, _, err := ssh.ParseAuthorizedKey([]byte(pveHostKey))
	require.NoError(t, err)
	other, _, _, _, err := ssh.ParseAuthorizedKey([]byte(ecdsaHostKey))
	require.NoError(t, err)
	for _, in := range []string{pveHostKey, pveKeyFP, "[pve]:22 " + pveAuthorized} {
		pin, err := stacks.ParseHostKey(in)
		require.NoError(t, err)
		assert.True(t, pin.Matches(pve), in)
		assert.False(t, pin.Matches(other), in)
	}
	assert.False(t, stacks.HostKey{}.Matches(pve), "no pin matches nothing (callers accept any key themselves)")
}

// hostKeyProblems loads src and returns the errors and warnings at path.
func hostKeyProblems(t *testing.T, src stacks.Source, path string) (errs, warns []string) {
	t.Helper()
	_, d := stacks.Load(src)
	for _, p := range d.Errors {
		if p.Path == path {
			errs = append(errs, p.Message)
		}
	}
	for _, p := range d.Warnings {
		if p.Path == path {
			warns = append(warns, p.Message)
		}
	}
	if len(errs) == 0 {
		require.NoError(t, d.Err(), "no other problem expected")
	}
	return errs, warns
}

func TestProxmoxHostKeyValidation(t *testing.T) {
	t.Parallel()
	const path = "proxmox.ssh.hostKey"
	cases := map[string]struct {
		ssh      obj
		dnsmasq  bool
		access   string
		wantErr  string
		wantWarn string
	}{
		"key, dnsmasq":                      {ssh: obj{"hostKey": pveHostKey}, dnsmasq: true},
		"ecdsa key, dnsmasq":                {ssh: obj{"hostKey": ecdsaHostKey}, dnsmasq: true},
		"ssh-keyscan line for the host":     {ssh: obj{"hostKey": "192.168.122.70 " + pveAuthorized}, dnsmasq: true},
		"known_hosts line with the port":    {ssh: obj{"hostKey": "[pve.lan]:2222 " + pveAuthorized, "host": "pve.lan", "port": 2222}, dnsmasq: true},
		"hashed known_hosts line":           {ssh: obj{"hostKey": "|1|F1E1KeoE/eEWhi10WpGv4OdiO6Y=|3988QV0VE8wmZL7suNrYQLITLCg= " + pveAuthorized}, dnsmasq: true},
		"fingerprint, only the ssh-proxy":   {ssh: obj{"hostKey": pveKeyFP}, access: stacks.AccessSSHProxy},
		"rsa key, only the ssh-proxy":       {ssh: obj{"hostKey": rsaHostKey}, access: stacks.AccessSSHProxy},
		"nothing pinned, no SSH at all":     {ssh: obj{}},
		"fingerprint, no SSH at all":        {ssh: obj{"hostKey": pveKeyFP}},
		"known_hosts line for another host": {ssh: obj{"hostKey": "10.0.0.9 " + pveAuthorized}, dnsmasq: true, wantWarn: "is a known_hosts line for 10.0.0.9, not for 192.168.122.70: make sure it is this host's key"},
		"known_hosts line for another port": {ssh: obj{"hostKey": "192.168.122.70 " + pveAuthorized, "port": 2222}, dnsmasq: true, wantWarn: "not for [192.168.122.70]:2222"},
		"nothing pinned, dnsmasq": {ssh: obj{}, dnsmasq: true,
			wantWarn: "not set: SSH to 192.168.122.70 accepts any host key, so a machine in the middle could take the dnsmasq reservations; `make doctor` prints the host's key"},
		"nothing pinned, ssh-proxy": {ssh: obj{}, access: stacks.AccessSSHProxy,
			wantWarn: "could take the ssh-proxy traffic (Talos and Kubernetes API calls)"},
		"nothing pinned, both": {ssh: obj{"host": "pve.lan"}, dnsmasq: true, access: stacks.AccessSSHProxy,
			wantWarn: "SSH to pve.lan accepts any host key, so a machine in the middle could take the dnsmasq reservations and the ssh-proxy traffic"},
		"not a key": {ssh: obj{"hostKey": "ssh-ed25519 nope"}, dnsmasq: true,
			wantErr: `"ssh-ed25519 nope" is neither a public key line like "ssh-ed25519 AAAA..."`},
		"malformed fingerprint": {ssh: obj{"hostKey": "SHA256:abc"}, access: stacks.AccessSSHProxy,
			wantErr: `"SHA256:abc" is not a SHA256 fingerprint`},
		"fingerprint, dnsmasq": {ssh: obj{"hostKey": pveKeyFP}, dnsmasq: true, access: stacks.AccessSSHProxy,
			wantErr: "a fingerprint cannot be checked by the command provider, which runs the dnsmasq reservations over SSH: it takes only a whole key; pin the key line instead (`ssh-keyscan -t ed25519 192.168.122.70`, after checking that its fingerprint is " + pveKeyFP + ")"},
		"rsa key, dnsmasq": {ssh: obj{"hostKey": rsaHostKey}, dnsmasq: true,
			wantErr: "an RSA key makes the command provider, which runs the dnsmasq reservations over SSH, offer only SHA-1 RSA signatures"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := proxmoxKeys()
			px := at(k, "proxmox")
			px["ssh"] = c.ssh
			px["dnsmasq"] = obj{"enabled": c.dnsmasq}
			if c.access != "" {
				px["access"] = c.access
			}
			errs, warns := hostKeyProblems(t, proxmoxSource(k), path)
			if c.wantErr == "" {
				assert.Empty(t, errs)
			} else {
				require.Len(t, errs, 1)
				assert.Contains(t, errs[0], c.wantErr)
			}
			if c.wantWarn == "" {
				assert.Empty(t, warns)
			} else {
				require.Len(t, warns, 1)
				assert.Contains(t, warns[0], c.wantWarn)
			}
		})
	}
}

func TestRescueHostKeyValidation(t *testing.T) {
	t.Parallel()
	worker := func(rescue obj) keys {
		k := vpsKeys()
		at(k, "nodes")["workers"] = []any{obj{"name": "node-1", "ip": "203.0.113.11", "rescue": rescue}}
		return k
	}
	const path = "nodes.workers[0].rescue.hostKey"
	cases := map[string]struct {
		rescue   obj
		wantErr  string
		wantWarn string
	}{
		"key":                 {rescue: obj{"hostKey": pveHostKey}},
		"ssh-keyscan line":    {rescue: obj{"hostKey": "203.0.113.11 " + pveAuthorized}},
		"line for its host":   {rescue: obj{"hostKey": "rescue.example.net " + pveAuthorized, "host": "rescue.example.net"}},
		"line for other host": {rescue: obj{"hostKey": "203.0.113.10 " + pveAuthorized}, wantWarn: "is a known_hosts line for 203.0.113.10, not for 203.0.113.11"},
		"nothing pinned": {rescue: obj{},
			wantWarn: "not set: the install's SSH to 203.0.113.11 accepts any host key, so a machine in the middle would get the rescue password and could write the disk; while the server is in rescue, `ssh-keyscan -t ed25519 203.0.113.11` prints the key"},
		"fingerprint": {rescue: obj{"hostKey": rescueKeyFP},
			wantErr: "a fingerprint cannot be checked by the command provider, which runs the install over SSH"},
		"rsa key":         {rescue: obj{"hostKey": rsaHostKey}, wantErr: "an RSA key makes the command provider, which runs the install over SSH"},
		"not a key":       {rescue: obj{"hostKey": "AAAA"}, wantErr: `"AAAA" is neither a public key line`},
		"two keys":        {rescue: obj{"hostKey": pveHostKey + "\n" + ecdsaHostKey}, wantErr: "holds several lines"},
		"MD5 fingerprint": {rescue: obj{"hostKey": "MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48"}, wantErr: "is an MD5 fingerprint"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c.rescue["password"] = rescuePW
			errs, warns := hostKeyProblems(t, vpsSource(worker(c.rescue)), path)
			if c.wantErr == "" {
				assert.Empty(t, errs)
			} else {
				require.Len(t, errs, 1)
				assert.Contains(t, errs[0], c.wantErr)
			}
			if c.wantWarn == "" {
				assert.Empty(t, warns)
			} else {
				require.Len(t, warns, 1)
				assert.Contains(t, warns[0], c.wantWarn)
			}
		})
	}
}

func TestRescueHostKeyIsOnlyForVPS(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "nodes", "workers", 0)["rescue"] = obj{"hostKey": pveHostKey}
	_, d := stacks.Load(proxmoxSource(k))
	require.Error(t, d.Err())
	assert.Contains(t, d.Err().Error(), "nodes.workers[0].rescue: is only valid for platform vps")
}

func TestCommandHostKey(t *testing.T) {
	t.Parallel()
	assert.Empty(t, stacks.CommandHostKey(""), "nothing pinned: the provider checks nothing")
	assert.Equal(t, pveAuthorized, stacks.CommandHostKey("pve.lan "+pveHostKey), "the bare key, as ssh.ParseAuthorizedKey reads it")
	// Load refuses these where the provider connects; were one to get
	// through, the provider must fail on it, not ignore it.
	assert.Equal(t, pveKeyFP, stacks.CommandHostKey(pveKeyFP))
	assert.Equal(t, "garbage", stacks.CommandHostKey("garbage"))
}
