package stacks

import (
	"fmt"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/agekeys"
	"github.com/fluodata/talos-pulumi/internal/backuptarget"
)

// Limits of the retention: beyond them a number is a typo, and a listing
// of the target would take long.
const (
	maxBackupKeepLast   = 1000
	maxBackupKeepDaily  = 3660
	maxBackupKeepWeekly = 520
)

// validateBackup checks the backup section when the stack has one: a target
// it can write to, at least one recipient (a backup is never written in
// clear), credentials only where they are used, and a retention in range.
func validateBackup(d *Diagnostics, cfg *Config) {
	b := &cfg.Backup
	if b.Target == "" && len(b.Recipients) == 0 && b.S3.AccessKeyID == "" && !b.S3.SecretAccessKey.IsSet() {
		return // no backups
	}
	scheme := validateBackupTarget(d, b.Target)
	if b.Schedule != "" {
		validateBackupSchedule(d, b, scheme)
	}
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
	if s3.CAFile != "" && scheme != "" && scheme != "s3" {
		d.errorf("backup.s3.caFile", "is only used with an s3:// target")
	}
	validateKeyFilePath(d, "backup.s3.caFile", s3.CAFile)
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

// validateBackupTarget checks the target URL (backuptarget.Parse, the
// object store's own rule) and returns its scheme ("" when it is refused).
func validateBackupTarget(d *Diagnostics, target string) string {
	const key = "backup.target"
	if target == "" {
		d.errorf(key, "is required: 'file:///path/to/backups' or 's3://bucket/prefix?endpoint=https://...'")
		return ""
	}
	t, err := backuptarget.Parse(target)
	if err != nil {
		d.errorf(key, "%v", err)
		return ""
	}
	return t.Scheme
}

// validateBackupSchedule checks what the in-cluster schedule needs of the
// rest of the section (its cron syntax is the TalosCluster's rule): the
// cluster writes to S3 itself, over https, and talos-backup encrypts to one
// age X25519 key, which must be every recipient there is, as every backup
// is encrypted to all of them.
func validateBackupSchedule(d *Diagnostics, b *BackupConfig, scheme string) {
	const key = "backup.schedule"
	switch scheme {
	case "":
		// The target's own problem is reported.
	case "s3":
		t, err := backuptarget.Parse(b.Target)
		switch {
		case err != nil:
			// The target's own problem is reported.
		case strings.HasPrefix(t.Endpoint, "http://"):
			d.errorf(key, "needs an https endpoint in backup.target: the cluster's CronJob sends the snapshots to it over the network, not from this machine")
		case t.SigningRegion() == "":
			d.errorf("backup.target", "needs the bucket's region with backup.schedule (s3://%s/...?region=eu-west-1): the cluster's CronJob signs for it and has no AWS environment to find it in (make backup would take AWS_REGION from yours)", t.Bucket)
		}
	default:
		d.errorf(key, "needs an s3:// backup.target: the cluster's CronJob cannot write to a %s:// target on this machine", scheme)
	}
	if len(b.Recipients) > 1 || len(b.Recipients) == 1 && !agekeys.IsX25519(b.Recipients[0]) {
		d.errorf(key, "needs exactly one recipient in backup.recipients, an age1... key: the in-cluster snapshots are encrypted by Sidero's talos-backup, which takes one age X25519 key (no SSH key, no second recipient); leave backup.schedule out to keep these recipients")
	}
}
