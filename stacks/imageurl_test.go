package stacks_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

func imageURLInvalidCases() []invalidCase {
	url := func(u string) func() stacks.Source {
		return vpsWith(func(k keys) { at(k, "vps")["imageUrl"] = u })
	}
	return []invalidCase{
		{"image suffix only in the query", url("https://mirror.example.com/get?file=metal-amd64.raw.zst"),
			"vps.imageUrl", `"https://mirror.example.com/get?..." must name a raw disk image`},
		{"image suffix escaped in the path", url("https://mirror.example.com/metal-amd64.raw%2Ezst"),
			"vps.imageUrl", "must name a raw disk image"},
		{"presigned URL over ftp", url("ftp://mirror.example.com/metal-amd64.raw?X-Amz-Signature=abc"),
			"vps.imageUrl", `"ftp://mirror.example.com/metal-amd64.raw?..." is not an http(s) URL`},
	}
}

// Messages about vps.imageUrl leave its query out: in a presigned URL it is
// a credential.
func TestImageURLMessagesLeaveTheQueryOut(t *testing.T) {
	t.Parallel()
	for _, tc := range imageURLInvalidCases() {
		_, d := program.Validate(tc.src())
		require.True(t, d.HasErrors(), tc.name)
		for _, p := range d.Errors {
			assert.NotContains(t, p.Message, "X-Amz-Signature", tc.name)
			assert.NotContains(t, p.Message, "file=", tc.name)
		}
	}
}

// A presigned URL (a query string after the image's path) is a valid image
// URL, in each format.
func TestPresignedImageURLsAreAccepted(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{".raw", ".raw.zst", ".raw.xz", ".raw.gz"} {
		u := "https://bucket.s3.eu-west-1.amazonaws.com/talos/metal-amd64" + suffix +
			"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=3600&X-Amz-Signature=0123abcd"
		k := vpsKeys()
		at(k, "vps")["imageUrl"] = u
		cfg, d := program.Validate(vpsSource(k))
		require.NoError(t, d.Err(), suffix)
		assert.Empty(t, d.Warnings, suffix)
		assert.Equal(t, u, cfg.VPS.ImageURL, "the URL is handed on as given")
	}
}
