package backupstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/backupstore"
)

// The fake S3's bucket, the prefix the store uses in it, and the
// credentials given explicitly (tests run in parallel: no environment).
const (
	testBucket = "backups"
	testPrefix = "clusters/prod"
	testKeyID  = "AKIDTEST"
	testSecret = "test-secret-key"
)

// target is a backup target the store suite runs against.
type target struct {
	name string
	open func(t *testing.T, opts backupstore.Options) *fixture
}

// fixture is an opened store with a look at its raw storage.
type fixture struct {
	store *backupstore.Store
	// raw returns every stored file or object, path to bytes (for S3 the
	// object's body followed by its metadata), to look for plain bytes.
	raw func(t *testing.T) map[string][]byte
	// leftovers lists what an aborted upload could leave: files in the
	// directory, or unfinished multipart uploads.
	leftovers func(t *testing.T) []string
	// dir is the file target's directory ("" for S3).
	dir string
	// multiparts counts the multipart uploads started (nil for a file
	// target).
	multiparts func() int
}

// targets are the kinds of target every store test covers.
var targets = []target{
	{name: "file", open: openFileTarget},
	{name: "s3", open: openS3Target},
}

// openFileTarget opens a file:// target in a fresh directory (which Open
// creates: it does not exist yet).
func openFileTarget(t *testing.T, opts backupstore.Options) *fixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "backups")
	s, err := backupstore.Open(t.Context(), "file://"+dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o700), info.Mode().Perm(), "the target directory is private")
	return &fixture{
		store: s,
		dir:   dir,
		raw: func(t *testing.T) map[string][]byte {
			t.Helper()
			out := map[string][]byte{}
			require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(p)
				out[p] = b
				return err
			}))
			return out
		},
		leftovers: func(t *testing.T) []string {
			t.Helper()
			var files []string
			require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					files = append(files, p)
				}
				return err
			}))
			return files
		},
	}
}

// openS3Target serves gofakes3's in-memory backend on loopback and opens
// s3://backups/clusters/prod on it, path-style, with explicit credentials.
func openS3Target(t *testing.T, opts backupstore.Options) *fixture {
	t.Helper()
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket(testBucket))
	fake := gofakes3.New(backend).Server()
	var multiparts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Query().Has("uploads") {
			multiparts.Add(1)
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	opts.AccessKeyID, opts.SecretAccessKey = testKeyID, testSecret
	s, err := backupstore.Open(t.Context(),
		"s3://"+testBucket+"/"+testPrefix+"?endpoint="+srv.URL+"&use_path_style=true&region=us-east-1", opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(testKeyID, testSecret, ""),
	})
	return &fixture{
		store:      s,
		multiparts: func() int { return int(multiparts.Load()) },
		raw: func(t *testing.T) map[string][]byte {
			t.Helper()
			list, err := backend.ListBucket(testBucket, nil, gofakes3.ListBucketPage{})
			require.NoError(t, err)
			out := map[string][]byte{}
			for _, c := range list.Contents {
				obj, err := backend.GetObject(testBucket, c.Key, nil)
				require.NoError(t, err)
				body, err := io.ReadAll(obj.Contents)
				require.NoError(t, err)
				require.NoError(t, obj.Contents.Close())
				for k, v := range obj.Metadata {
					body = append(body, "\n"+k+": "+v...)
				}
				out[c.Key] = body
			}
			return out
		},
		leftovers: func(t *testing.T) []string {
			t.Helper()
			var left []string
			list, err := backend.ListBucket(testBucket, nil, gofakes3.ListBucketPage{})
			require.NoError(t, err)
			for _, c := range list.Contents {
				left = append(left, "object "+c.Key)
			}
			ups, err := client.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(testBucket)})
			var apiErr smithy.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchUpload" {
				return left // gofakes3's answer for a bucket that never had one
			}
			require.NoError(t, err)
			for _, u := range ups.Uploads {
				left = append(left, "multipart upload "+aws.ToString(u.Key))
			}
			return left
		},
	}
}

// x25519 makes a fresh age identity.
func x25519(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	return id
}

// payload makes n random bytes with marker written in several places, so a
// leak of any part of a plain backup shows.
func payload(t testing.TB, n int, marker string) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	for _, at := range []int{0, n / 3, n / 2, n - len(marker)} {
		copy(b[at:], marker)
	}
	return b
}

// failingReader returns its bytes, then err: a backup source that breaks
// half way (a dropped etcd stream, a full pipe).
type failingReader struct {
	r   io.Reader
	err error
}

// Read implements io.Reader.
func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if errors.Is(err, io.EOF) {
		return n, f.err
	}
	return n, err
}

// cancellingReader cancels the Put's context once it has given after bytes,
// and goes on giving bytes: the operator's Ctrl-C during an upload.
type cancellingReader struct {
	r      io.Reader
	after  int
	read   int
	cancel context.CancelFunc
}

// Read implements io.Reader.
func (c *cancellingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	if c.read >= c.after {
		c.cancel()
	}
	return n, err
}

// zeros is an endless source of zero bytes, for large payloads that cost
// no memory.
type zeros struct{}

// Read implements io.Reader.
func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// readAllGet decrypts name into memory.
func readAllGet(t *testing.T, s *backupstore.Store, name string, ids []age.Identity) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := s.Get(t.Context(), name, ids, &buf)
	return buf.Bytes(), err
}
