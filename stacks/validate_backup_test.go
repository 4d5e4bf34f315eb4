package stacks_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks"
)

// withBackup is the Proxmox base with a backup section edited by edit.
func withBackup(edit func(b obj)) func() stacks.Source {
	return func() stacks.Source {
		k := proxmoxKeysWithBackup()
		edit(at(k, "backup"))
		return k.source("proxmox", "backup")
	}
}

func backupInvalidCases() []invalidCase {
	return []invalidCase{
		{"backup without a target", withBackup(func(b obj) { delete(b, "target") }), "backup.target", "is required"},
		{"backup to gs://", withBackup(func(b obj) { b["target"] = "gs://bucket/lab" }), "backup.target", `scheme "gs" is not file or s3`},
		{"backup to a relative directory", withBackup(func(b obj) { b["target"], b["s3"] = "file://backups", nil }), "backup.target", "names a local directory"},
		{"backup to a bucket over plain http", withBackup(func(b obj) { b["target"] = "s3://backups/lab?endpoint=http://minio.lan:9000" }),
			"backup.target", "plain http, which sends the credentials in clear"},
		{"backup query misspelt", withBackup(func(b obj) { b["target"] = "s3://backups/lab?endpiont=https://s3.example.com" }),
			"backup.target", `unknown parameter "endpiont"`},
		{"backup without recipients", withBackup(func(b obj) { delete(b, "recipients") }), "backup.recipients", "a backup is never written unencrypted"},
		{"backup to a private key", withBackup(func(b obj) { b["recipients"] = []any{exampleRecipient, "AGE-SECRET-KEY-1XYZ"} }),
			"backup.recipients[1]", "is an age identity, a private key"},
		{"backup credentials with a file target", withBackup(func(b obj) { b["target"] = "file:///var/backups/talos" }), "backup.s3", "only used with an s3:// target"},
		{"backup credentials without the key id", withBackup(func(b obj) { delete(at(b, "s3"), "accessKeyId") }), "backup.s3.accessKeyId", "is required"},
		{"backup keeps none", withBackup(func(b obj) { b["keep"] = obj{"last": 0} }), "backup.keep.last", "leave the key out for the default (7)"},
		{"backup schedule to a file target", withBackup(func(b obj) { b["schedule"], b["target"], b["s3"] = "@daily", "file:///var/backups/talos", nil }),
			"backup.schedule", "needs an s3:// backup.target: the cluster's CronJob cannot write to a file:// target"},
		{"backup schedule over plain http on this machine", withBackup(func(b obj) {
			b["schedule"], b["target"] = "@daily", "s3://backups/lab?endpoint=http://127.0.0.1:9000"
		}), "backup.schedule", "needs an https endpoint"},
		{"backup schedule with two recipients", withBackup(func(b obj) {
			b["schedule"], b["recipients"] = "@daily", []any{exampleRecipient, "age1lggyhqrw2nlhcxprm67z43rta597azn8gknawjehu9d9dl0jq3yqqvfafg"}
		}), "backup.schedule", "needs exactly one recipient"},
		{"backup schedule with an SSH recipient", withBackup(func(b obj) {
			b["schedule"], b["recipients"] = "@daily", []any{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl op@laptop"}
		}), "backup.schedule", "an age1... key"},
		// One region rule for make backup and the CronJob (issue 35, item
		// B.7): an AWS target names its region when the cluster signs too.
		{"backup schedule to AWS without a region", withBackup(func(b obj) {
			b["schedule"], b["target"] = "@daily", "s3://backups/lab"
		}), "backup.target", "needs the bucket's region with backup.schedule"},
		{"backup CA file with a file target", withBackup(func(b obj) { b["target"], b["s3"] = "file:///var/backups/talos", obj{"caFile": "/etc/ssl/minio.pem"} }),
			"backup.s3.caFile", "is only used with an s3:// target"},
		{"backup CA file that is a directory", withBackup(func(b obj) { at(b, "s3")["caFile"] = "/etc/ssl/" }), "backup.s3.caFile", "names a directory"},
		{"backup keeps negative days", withBackup(func(b obj) { b["keep"] = obj{"daily": -1} }), "backup.keep.daily", "-1 is out of range 0-3660"},
	}
}

// A stack without a backup section has none and needs none; one with a
// file target and an SSH recipient is valid, with the retention's defaults.
func TestBackupSection(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(proxmoxSource(proxmoxKeys()))
	require.NoError(t, d.Err())
	assert.Empty(t, cfg.Backup.Target)

	cfg, d = stacks.Load(withBackup(func(b obj) {
		b["target"], b["s3"] = "file:///var/backups/talos", nil
		b["recipients"] = []any{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl op@laptop"}
	})())
	require.NoError(t, d.Err())
	assert.Equal(t, []int{7, 7, 4}, []int{cfg.Backup.Keep.Last, *cfg.Backup.Keep.Daily, *cfg.Backup.Keep.Weekly})

	_, d = stacks.Load(withBackup(func(b obj) { b["keep"] = obj{"daily": 0, "weekly": 0} })())
	require.NoError(t, d.Err(), "0 days and weeks: only the newest ones")

	cfg, d = stacks.Load(withBackup(func(b obj) { b["schedule"] = "0 */6 * * *" })())
	require.NoError(t, d.Err(), "a schedule with an s3 target over https and one age key")
	assert.Equal(t, "0 */6 * * *", cfg.Backup.Schedule)
}

// A private key pasted as a recipient is refused without being echoed.
func TestABackupIdentityIsNeverEchoed(t *testing.T) {
	t.Parallel()
	const identity = "AGE-SECRET-KEY-1QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQS3290GG"
	_, d := stacks.Load(withBackup(func(b obj) { b["recipients"] = []any{identity} })())
	require.Error(t, d.Err())
	assert.NotContains(t, d.Err().Error(), identity)
}
