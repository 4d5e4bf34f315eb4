package backuptarget_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/backuptarget"
)

// One region rule for make backup and the in-cluster schedule (issue 35,
// item B.7): the target's region; a store with an endpoint is signed for
// us-east-1 when it names none (not the operator's AWS_REGION, which the
// cluster lacks); AWS without a region is left to the AWS environment.
func TestSigningRegion(t *testing.T) {
	t.Parallel()
	for target, want := range map[string]string{
		"s3://b/p?region=eu-west-1":                                 "eu-west-1",
		"s3://b/p?endpoint=https://minio.lan:9000&region=garage":    "garage",
		"s3://b/p?endpoint=https://minio.lan:9000":                  "us-east-1",
		"s3://b/p?endpoint=https://minio.lan:9000&use_path_style=1": "us-east-1",
		"s3://b/p": "",
	} {
		tg, err := backuptarget.Parse(target)
		require.NoError(t, err, target)
		assert.Equal(t, want, tg.SigningRegion(), target)
	}
}
