package stacks

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/agekeys"
)

// Limits of the retention: beyond them a number is a typo, and a listing
// of the target would take long.
const (
	maxBackupKeepLast   = 1000
	maxBackupKeepDaily  = 3660
	maxBackupKeepWeekly = 520
)

// backupQueryKeys are what an s3:// target may say beside the bucket and
// prefix (gocloud.dev's s3blob reads them).
var backupQueryKeys = []string{"endpoint", "region", "use_path_style"}

// validateBackup checks the backup section when the stack has one: a target
// it can write to, at least one recipient (a backup is never written in
// clear), credentials only where they are used, and a retention in range.
func validateBackup(d *Diagnostics, cfg *Config) {
	b := &cfg.Backup
	if b.Target == "" && len(b.Recipients) == 0 && b.S3.AccessKeyID == "" && !b.S3.SecretAccessKey.IsSet() {
		return // no backups
	}
	scheme := validateBackupTarget(d, b.Target)
	if len(b.Recipients) == 0 {
		d.errorf("backup.recipients", "at least one recipient is required: a backup is never written unencrypted; add your age public key ('age-keygen -y key.txt') or an SSH ed25519 public key line")
	}
	for i, r := range b.Recipients {
		if msg := agekeys.RecipientProblem(r); msg != "" {
			d.errorf(fmt.Sprintf("backup.recipients[%d]", i), "%s", msg)
		}
	}
	s3 := b.S3
	if (s3.AccessKeyID != "" || s3.SecretAccessKey.IsSet()) && scheme != "" && scheme != "s3" {
		d.errorf("backup.s3", "credentials are only used with an s3:// target")
	}
	if s3.AccessKeyID != "" && !s3.SecretAccessKey.IsSet() {
		d.errorf("backup.s3.secretAccessKey", "is required with backup.s3.accessKeyId: `pulumi config set --secret --path backup.s3.secretAccessKey <key>`")
	}
	if s3.SecretAccessKey.IsSet() && s3.AccessKeyID == "" {
		d.errorf("backup.s3.accessKeyId", "is required with backup.s3.secretAccessKey")
	}
	keep := b.Keep
	if msg := inputs.RangeProblem(keep.Last, 1, maxBackupKeepLast); msg != "" {
		d.errorf("backup.keep.last", "%s", msg)
	}
	if keep.Daily != nil {
		if msg := inputs.RangeProblem(*keep.Daily, 0, maxBackupKeepDaily); msg != "" {
			d.errorf("backup.keep.daily", "%s", msg)
		}
	}
	if keep.Weekly != nil {
		if msg := inputs.RangeProblem(*keep.Weekly, 0, maxBackupKeepWeekly); msg != "" {
			d.errorf("backup.keep.weekly", "%s", msg)
		}
	}
}

// validateBackupTarget checks the target URL and returns its scheme ("" when
// it is refused).
func validateBackupTarget(d *Diagnostics, target string) string {
	const key = "backup.target"
	if target == "" {
		d.errorf(key, "is required: 'file:///path/to/backups' or 's3://bucket/prefix?endpoint=https://...'")
		return ""
	}
	u, err := url.Parse(target)
	if err != nil {
		// The URL may hold a credential: name the problem, not the value.
		d.errorf(key, "is not a URL")
		return ""
	}
	if u.User != nil {
		d.errorf(key, "must not carry credentials; use backup.s3.accessKeyId and backup.s3.secretAccessKey, or the AWS environment")
		return ""
	}
	switch u.Scheme {
	case "file":
		switch {
		case u.Host != "" && u.Host != "localhost":
			d.errorf(key, "a file:// URL names a local directory: file:///abs/path (three slashes), not host %q", u.Host)
		case !path.IsAbs(u.Path) || path.Clean(u.Path) != strings.TrimSuffix(u.Path, "/") && u.Path != "/":
			d.errorf(key, "%q is not a clean absolute directory, e.g. file:///var/backups/talos", u.Path)
		case u.RawQuery != "":
			d.errorf(key, "a file:// URL takes no query")
		}
	case "s3":
		if u.Host == "" {
			d.errorf(key, "names no bucket: s3://bucket/prefix")
		}
		q := u.Query()
		for k := range q {
			if !containsString(backupQueryKeys, k) {
				d.errorf(key, "unknown query parameter %q (known: %s)", k, strings.Join(backupQueryKeys, ", "))
			}
		}
		if e := q.Get("endpoint"); e != "" {
			if msg := endpointProblem(e); msg != "" {
				d.errorf(key, "endpoint %s", msg)
			}
		}
		if v := q.Get("use_path_style"); v != "" && v != "true" && v != "false" {
			d.errorf(key, "use_path_style is %q, not true or false", v)
		}
	default:
		d.errorf(key, "scheme %q is not file or s3", u.Scheme)
		return ""
	}
	return u.Scheme
}

// endpointProblem says what is wrong with an S3 endpoint URL, or "": the
// credentials and the encrypted objects travel over it, so plain http is
// only for a store on this machine.
func endpointProblem(e string) string {
	u, err := url.Parse(e)
	switch {
	case err != nil || u.Host == "":
		return fmt.Sprintf("%q is not a URL like https://s3.example.com", e)
	case u.Scheme == "https":
		return ""
	case u.Scheme == "http" && isLoopbackHost(u.Hostname()):
		return ""
	case u.Scheme == "http":
		return fmt.Sprintf("%q uses plain http, which sends the credentials in clear; use https (http only for a store on this machine)", e)
	}
	return fmt.Sprintf("%q is not http(s)", e)
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
