// Package backupstore keeps a cluster's backups, encrypted, in an object
// store: a directory (file:///abs/path) or an S3-compatible bucket
// (s3://bucket/prefix, MinIO, B2, R2, Ceph and AWS alike).
//
// What the target holds, and what it does not:
//
//   - The backup itself only as age ciphertext (filippo.io/age). It is
//     encrypted to the stack's backup.recipients, public keys only, so the
//     machine that takes a backup cannot read an older one, and a stolen
//     bucket gives away nothing of the etcd data or the Pulumi state in it.
//     age authenticates every 64 KiB chunk, so a damaged or altered object
//     fails to decrypt instead of restoring wrong bytes.
//   - In clear: the object names (the cluster's name and the time of the
//     backup) and the metadata given to Put (times, versions, node names).
//     Both are small and not secret, and they let List and Retain work
//     without any private key; nothing secret may go into them.
//
// The objects are written through gocloud.dev/blob, the library Pulumi's
// own diy state backend uses for the same targets, so that an operator who
// knows one URL form knows both. Writes are atomic there: an object appears
// only when its writer closes without error, and an aborted write (an
// error, a cancelled context) leaves no object behind.
package backupstore
