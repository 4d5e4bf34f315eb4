package backupstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"filippo.io/age"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"

	"github.com/fluodata/talos-pulumi/internal/agekeys"
	"github.com/fluodata/talos-pulumi/internal/backuptarget"
)

// Suffix ends the name of every backup object. List shows only objects
// with it, so other files under the same prefix (a README, a writer's
// temporary file, another tool's data) are never taken for a backup, and
// Put, Get and Delete refuse other names so they touch nothing else.
const Suffix = ".age"

// ErrNotFound is returned by Get for a backup that does not exist.
var ErrNotFound = errors.New("backup not found")

// ErrWrongIdentity is returned by Get when none of the identities is one
// of the backup's recipients: the backup was encrypted to other keys.
var ErrWrongIdentity = errors.New("none of the given identities is a recipient of the backup (use the private key of one of backup.recipients at the time of the backup)")

const (
	// maxMetaValue bounds one metadata value: metadata is for small facts
	// in clear (a time, a version, a node name), never for data.
	maxMetaValue = 256
	// maxMetaTotal is S3's limit on all user metadata of an object (keys
	// and values): beyond it the upload fails only at its end.
	maxMetaTotal = 2048
	// maxName leaves room for a prefix within S3's 1024-byte keys.
	maxName = 512
	// copyBuffer is age's chunk size: each read fills one STREAM chunk.
	copyBuffer = 64 << 10
	// defaultPartSize is an S3 upload's part size. Parts are held in
	// memory (the first 16 MiB the transfer manager reads to choose
	// between one PUT and a multipart upload, then partConcurrency+1
	// parts), so a backup is streamed with about 80 MiB of buffers
	// whatever its size, and S3's 10,000 parts allow up to ~156 GiB.
	defaultPartSize = 16 << 20
	// minPartSize is S3's smallest part but the last.
	minPartSize = 5 << 20
	// partConcurrency is how many parts upload at once.
	partConcurrency = 3
	// defaultRegion is used when neither the URL nor the AWS environment
	// names one: S3-compatible stores (MinIO, Ceph) accept any region,
	// and AWS's SDK refuses to sign without one.
	defaultRegion = "us-east-1"
)

// Options are the settings of Open that do not belong in the target URL.
type Options struct {
	// AccessKeyID, SecretAccessKey and SessionToken are the S3 credentials.
	// They are given here, not in the URL, so that the URL can be printed
	// and kept in the stack's settings. Empty: the AWS SDK's usual chain
	// (AWS_ACCESS_KEY_ID and the other environment variables,
	// ~/.aws/credentials and config, then instance roles).
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Endpoint overrides the URL's endpoint parameter (an S3-compatible
	// server's base URL, http or https); tests point it at a local server.
	Endpoint string
	// PartSize is the size of an S3 multipart upload's parts (0: 16 MiB;
	// at least 5 MiB, S3's minimum). It bounds the memory of a Put.
	PartSize int
	// CABundle is PEM of the CAs an https endpoint's certificate is checked
	// against instead of the system's roots (a private CA); none: the
	// system's roots.
	CABundle []byte
}

// Store is an opened backup target. It holds no state besides the bucket,
// so one Store may serve concurrent calls.
type Store struct {
	bucket   *blob.Bucket
	partSize int
}

// Object describes one stored backup.
type Object struct {
	// Name is the object's name under the target's prefix, as given to Put.
	Name string
	// Size is the encrypted size in bytes.
	Size int64
	// Created is when the store finished writing the object (UTC): the
	// file's modification time, or S3's Last-Modified. Copying objects to
	// another bucket resets it, which is why Put's callers also put the
	// time in the name.
	Created time.Time
	// Meta is the metadata given to Put. It is stored in clear.
	Meta map[string]string
}

// Open opens a backup target URL: file:///abs/path (a directory, made with
// mode 0700 if missing: names and metadata are in clear) or
// s3://bucket/prefix?endpoint=...&region=...&use_path_style=true (any other
// parameter is refused, so a typo cannot send backups to AWS's default
// endpoint). Credentials never come from the URL (see Options); for S3, Open
// checks that the bucket can be reached.
func Open(ctx context.Context, target string, opts Options) (*Store, error) {
	t, err := backuptarget.Parse(target)
	if err != nil {
		if t.Redacted == "" {
			return nil, err // the URL does not parse: nothing to name
		}
		return nil, fmt.Errorf("unable to open backup target %s: %w", t.Redacted, err)
	}
	partSize := cmp.Or(opts.PartSize, defaultPartSize)
	if partSize < minPartSize {
		return nil, fmt.Errorf("unable to open backup target %s: the part size %d is below S3's minimum of %d bytes", t.Redacted, partSize, minPartSize)
	}
	var b *blob.Bucket
	if t.Scheme == "file" {
		b, err = openFile(t)
	} else {
		b, err = openS3(ctx, t, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("unable to open backup target %s: %w", t.Redacted, err)
	}
	return &Store{bucket: b, partSize: partSize}, nil
}

// openFile opens a file:///abs/path target. A writer's temporary file goes
// next to its object (NoTempDir), so the final rename never crosses file systems.
func openFile(t backuptarget.Target) (*blob.Bucket, error) {
	dir := filepath.FromSlash(t.Dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("unable to create directory %s: %w", dir, err)
	}
	b, err := fileblob.OpenBucket(dir, &fileblob.Options{
		NoTempDir:   true,
		DirFileMode: 0o700,
	})
	if err != nil {
		return nil, fmt.Errorf("unable to open directory %s: %w", dir, err)
	}
	return b, nil
}

// openS3 opens an s3://bucket/prefix target.
func openS3(ctx context.Context, t backuptarget.Target, opts Options) (*blob.Bucket, error) {
	name, prefix := t.Bucket, t.Prefix
	if prefix != "" {
		if err := checkPath(prefix); err != nil {
			return nil, fmt.Errorf("unable to use prefix %q: %w", prefix, err)
		}
		prefix += "/"
	}
	endpoint := cmp.Or(opts.Endpoint, t.Endpoint)

	load := []func(*config.LoadOptions) error{
		// The SDK's default since 2025 adds CRC32 trailers in aws-chunked
		// bodies, which several S3-compatible stores refuse. age already
		// authenticates every chunk of a backup, so checksums only where
		// S3 requires them lose nothing.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if len(opts.CABundle) > 0 {
		// The AWS SDK's custom bundle, as AWS_CA_BUNDLE gives it to the
		// in-cluster snapshots' image: it replaces the system's roots
		// (config's resolveCustomCABundle starts from an empty pool).
		load = append(load, config.WithCustomCABundle(bytes.NewReader(opts.CABundle)))
	}
	if r := t.SigningRegion(); r != "" {
		load = append(load, config.WithRegion(r))
	}
	if opts.AccessKeyID != "" || opts.SecretAccessKey != "" {
		if opts.AccessKeyID == "" || opts.SecretAccessKey == "" {
			return nil, errors.New("give both the access key id and the secret access key, or neither")
		}
		load = append(load, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(opts.AccessKeyID, opts.SecretAccessKey, opts.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("unable to load the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = t.PathStyle
		o.APIOptions = append(o.APIOptions, abortOutlivesCancel)
	})
	b, err := s3blob.OpenBucket(ctx, client, name, &s3blob.Options{
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
	})
	if err != nil {
		return nil, fmt.Errorf("unable to open bucket %s: %w", name, err)
	}
	ok, err := b.IsAccessible(ctx)
	if err == nil && !ok {
		err = errors.New("it does not exist")
	}
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("unable to reach bucket %s: %w", name, err)
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix)
	}
	return b, nil
}

// abortTimeout bounds the abort of a multipart upload whose Put was
// cancelled.
const abortTimeout = 30 * time.Second

// abortOutlivesCancel lets AbortMultipartUpload run when its context is
// already cancelled. Cancelling the writer's context is gocloud's only way
// to abort an upload, but the S3 transfer manager (as gocloud sets it up:
// no FailTimeout) then sends the abort with that same dead context, so it
// fails and the parts already sent stay in the bucket, unseen by List and
// billed until a lifecycle rule removes them. The abort gets a fresh,
// bounded context instead.
func abortOutlivesCancel(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("backupstore.AbortOutlivesCancel",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if _, ok := in.Parameters.(*s3.AbortMultipartUploadInput); ok && ctx.Err() != nil {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
				defer cancel()
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// Close releases the store.
func (s *Store) Close() error {
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("unable to close backup store: %w", err)
	}
	return nil
}

// Put encrypts plain to the recipients and streams it (age STREAM chunks) to
// name, which must end in Suffix. The write is atomic: a failure or a
// cancellation leaves nothing, and an object is replaced only by a complete
// one. meta is stored IN CLEAR so that List shows it without a key: small facts,
// not secret; keys a-z, 0-9 and '-', values up to 256 bytes, 2 KiB in all (S3).
func (s *Store) Put(ctx context.Context, name string, plain io.Reader, to []age.Recipient, meta map[string]string) (Object, error) {
	if err := checkName(name); err != nil {
		return Object{}, fmt.Errorf("unable to write backup %q: %w", name, err)
	}
	if len(to) == 0 {
		return Object{}, fmt.Errorf("unable to write backup %q: %w", name, agekeys.ErrNoRecipients)
	}
	if err := checkMeta(meta); err != nil {
		return Object{}, fmt.Errorf("unable to write backup %q: %w", name, err)
	}
	if err := s.write(ctx, name, plain, to, meta); err != nil {
		return Object{}, fmt.Errorf("unable to write backup %q: %w", name, err)
	}
	attrs, err := s.bucket.Attributes(ctx, name)
	if err != nil {
		return Object{}, fmt.Errorf("unable to read the attributes of backup %q: %w", name, err)
	}
	return object(name, attrs), nil
}

// write streams the encryption of plain into a new object. On any error it
// aborts the writer (cancels its context, then closes it), which is
// gocloud's way to drop a write.
func (s *Store) write(ctx context.Context, name string, plain io.Reader, to []age.Recipient, meta map[string]string) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.bucket.NewWriter(wctx, name, &blob.WriterOptions{
		// A fixed type: gocloud would otherwise buffer the first bytes
		// to sniff one, and the sniffed type of ciphertext is noise.
		ContentType:    "application/octet-stream",
		Metadata:       maps.Clone(meta),
		BufferSize:     s.partSize,
		MaxConcurrency: partConcurrency,
	})
	if err != nil {
		return fmt.Errorf("unable to create the object: %w", err)
	}
	abort := func(err error) error {
		cancel()
		_ = w.Close() // reports the cancel; the cause is err
		return err
	}
	enc, err := age.Encrypt(w, to...)
	if err != nil {
		return abort(fmt.Errorf("unable to encrypt to the recipients: %w", err))
	}
	src := &sourceReader{ctx: ctx, r: plain}
	if _, err := io.CopyBuffer(enc, src, make([]byte, copyBuffer)); err != nil {
		if src.err != nil {
			return abort(fmt.Errorf("unable to read the backup's source: %w", src.err))
		}
		return abort(fmt.Errorf("unable to store the encrypted backup: %w", err))
	}
	if err := enc.Close(); err != nil {
		return abort(fmt.Errorf("unable to store the encrypted backup: %w", err))
	}
	// If ctx ended after the last read, Close aborts the write and says so:
	// a cancelled backup never appears, even a complete one.
	if err := w.Close(); err != nil {
		return fmt.Errorf("unable to commit the object: %w", err)
	}
	return nil
}

// sourceReader stops reading when ctx ends, so a cancelled Put stops at
// the next chunk even if the source would go on, and records the source's
// own error to tell it from the store's.
type sourceReader struct {
	ctx context.Context
	r   io.Reader
	err error
}

// Read implements io.Reader.
func (s *sourceReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		s.err = err
		return 0, err
	}
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}

// List returns the backups under the target's prefix (the objects whose
// name ends in Suffix), newest first, with their metadata. Other objects,
// such as a writer's temporary file, are ignored.
func (s *Store) List(ctx context.Context) ([]Object, error) {
	var out []Object
	it := s.bucket.List(nil)
	for {
		lo, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("unable to list backups: %w", err)
		}
		if lo.IsDir || !strings.HasSuffix(lo.Key, Suffix) {
			continue
		}
		attrs, err := s.bucket.Attributes(ctx, lo.Key)
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("unable to read the attributes of backup %q: %w", lo.Key, err)
		}
		out = append(out, object(lo.Key, attrs))
	}
	sortNewestFirst(out)
	return out, nil
}

// object makes an Object from a blob's attributes.
func object(name string, a *blob.Attributes) Object {
	var meta map[string]string
	if len(a.Metadata) > 0 {
		meta = make(map[string]string, len(a.Metadata))
		for k, v := range a.Metadata {
			// S3 returns metadata keys in whatever case the server
			// chose; Put only takes lower-case ones.
			meta[strings.ToLower(k)] = v
		}
	}
	return Object{Name: name, Size: a.Size, Created: a.ModTime.UTC(), Meta: meta}
}

// sortNewestFirst orders objects by Created, newest first, and by name
// (descending) among equal times, so that the order is total.
func sortNewestFirst(objs []Object) {
	slices.SortStableFunc(objs, func(a, b Object) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
}

// Get decrypts the backup name with ids and streams the plain bytes to w. A
// damaged object fails only at the chunk where it breaks, so after an error
// what w got is incomplete and must be discarded. ErrWrongIdentity: no id is a
// recipient; ErrNotFound: no such backup.
func (s *Store) Get(ctx context.Context, name string, ids []age.Identity, w io.Writer) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("unable to read backup %q: %w", name, err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("unable to decrypt backup %q: %w", name, agekeys.ErrNoIdentities)
	}
	r, err := s.bucket.NewReader(ctx, name, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("unable to read backup %q: %w: %w", name, ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("unable to read backup %q: %w", name, err)
	}
	defer func() { _ = r.Close() }()
	// age sorts the identities it is given in place: a copy keeps the
	// caller's slice untouched for concurrent Gets.
	dec, err := age.Decrypt(r, slices.Clone(ids)...)
	if err != nil {
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) {
			return fmt.Errorf("unable to decrypt backup %q: %w: %w", name, ErrWrongIdentity, err)
		}
		return fmt.Errorf("unable to decrypt backup %q: %w", name, err)
	}
	src := &sourceReader{ctx: ctx, r: dec}
	if _, err := io.CopyBuffer(w, src, make([]byte, copyBuffer)); err != nil {
		if src.err != nil {
			return fmt.Errorf("unable to decrypt backup %q (what was written is incomplete: discard it): %w", name, src.err)
		}
		return fmt.Errorf("unable to write the decrypted backup %q: %w", name, err)
	}
	return nil
}

// Delete removes the backup name. A backup that is already gone is
// success: retention may run twice, or from two places.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("unable to delete backup %q: %w", name, err)
	}
	err := s.bucket.Delete(ctx, name)
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("unable to delete backup %q: %w", name, err)
	}
	return nil
}

// checkName refuses names that List would not show (no Suffix) or that a
// store would read differently (absolute, "..", empty segments, control
// characters), so that Put, Get and Delete only ever touch backups.
func checkName(name string) error {
	if len(name) > maxName {
		return fmt.Errorf("the name has %d bytes, more than %d", len(name), maxName)
	}
	if !strings.HasSuffix(name, Suffix) || strings.HasSuffix(name, "/"+Suffix) || name == Suffix {
		return fmt.Errorf("a backup's name ends in %q after a file name", Suffix)
	}
	return checkPath(name)
}

// checkPath checks a slash-separated object path (a name or a prefix).
func checkPath(p string) error {
	if !utf8.ValidString(p) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("the character %q is not allowed", r)
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errors.New("empty, \".\" and \"..\" path segments are not allowed")
		}
	}
	return nil
}

// checkMeta enforces the rules of Put's metadata.
func checkMeta(meta map[string]string) error {
	total := 0
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		v := meta[k]
		if !validMetaKey(k) {
			return fmt.Errorf("metadata key %q: only a-z, 0-9 and '-' are allowed (S3 folds the case of keys)", k)
		}
		if len(v) > maxMetaValue {
			return fmt.Errorf("metadata %q: the value has %d bytes, more than %d (metadata is for small facts in clear)", k, len(v), maxMetaValue)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("metadata %q: the value is not valid UTF-8", k)
		}
		total += len(k) + len(v)
	}
	if total > maxMetaTotal {
		return fmt.Errorf("the metadata has %d bytes, more than S3's %d", total, maxMetaTotal)
	}
	return nil
}

// validMetaKey reports whether k is a non-empty [a-z0-9-]+.
func validMetaKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}
