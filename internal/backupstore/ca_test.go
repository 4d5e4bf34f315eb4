package backupstore_test

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/backupstore"
)

// privateStore serves gofakes3 over https with a certificate of a CA of
// its own (a home lab MinIO's), and returns its URL and the CA as PEM.
func privateStore(t *testing.T) (string, []byte) {
	t.Helper()
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket(testBucket))
	srv := httptest.NewTLSServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// A store behind a private CA (issue 35, item B.7): refused with the
// system's roots, opened with backup.s3.caFile's bundle.
func TestAStoreBehindAPrivateCA(t *testing.T) {
	t.Parallel()
	url, ca := privateStore(t)
	target := "s3://" + testBucket + "/" + testPrefix + "?endpoint=" + url + "&use_path_style=true"
	opts := backupstore.Options{AccessKeyID: testKeyID, SecretAccessKey: testSecret}
	_, err := backupstore.Open(t.Context(), target, opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate", "the system's roots do not know the private CA")

	opts.CABundle = ca
	s, err := backupstore.Open(t.Context(), target, opts)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// What the in-cluster snapshots' image does with the CronJob's
// environment: talos-backup v0.1.0-beta.2's pkg/s3 builds its client with
// config.LoadDefaultConfig (AWS_CA_BUNDLE, the AWS SDK's custom bundle
// file, read from the environment), a BaseEndpoint and UsePathStyle, then
// PutObject. The file the ConfigMap mounts lets it reach the store behind
// the private CA; without it, the upload fails. (Not parallel: it sets the
// process's environment, as the pod's is.)
func TestTheImagesClientTrustsAWSCABundle(t *testing.T) {
	url, ca := privateStore(t)
	put := func(ctx context.Context) error {
		cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"))
		if err != nil {
			return err
		}
		client := s3.NewFromConfig(cfg, func(o *s3.Options) {
			o.BaseEndpoint = aws.String(url)
			o.UsePathStyle = true
		})
		_, err = client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(testBucket), Key: aws.String("lab/0123456789abcdef/lab-1.snap.age"), Body: strings.NewReader("snapshot"),
		})
		return err
	}
	t.Setenv("AWS_ACCESS_KEY_ID", testKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecret)
	t.Setenv("AWS_CA_BUNDLE", "")
	require.Error(t, put(t.Context()), "the private CA is unknown without the bundle")

	file := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(file, ca, 0o600))
	t.Setenv("AWS_CA_BUNDLE", file)
	require.NoError(t, put(t.Context()))
}
