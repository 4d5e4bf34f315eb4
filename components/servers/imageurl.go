package servers

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// imageURLRe is the suffix of a raw disk image the install script takes.
var imageURLRe = regexp.MustCompile(`\.raw(\.zst|\.xz|\.gz)?$`)

// ImageURLProblem says what is wrong with vps.imageUrl, or "". The image
// format is read from the URL's path, so a query string (a presigned
// object-store URL) is fine: the install script reads the suffix the same
// way and fetches the URL as it is. Messages show the URL without its
// query, which for a presigned URL is a credential.
func ImageURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return fmt.Sprintf("%q is not an http(s) URL", withoutQuery(raw))
	case !imageURLRe.MatchString(u.Path) || !imageURLRe.MatchString(beforeQuery(raw)):
		// Both the path and the URL as the script sees it (up to ? or #,
		// still percent-encoded) must end in the suffix.
		return fmt.Sprintf("%q must name a raw disk image ending in .raw, .raw.zst, .raw.xz or .raw.gz (before any ?query)", withoutQuery(raw))
	}
	return ""
}

// beforeQuery is a URL up to its query or fragment, as the install script
// cuts it.
func beforeQuery(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		return raw[:i]
	}
	return raw
}

// withoutQuery is a URL for messages: its query (and fragment) replaced by
// "?...".
func withoutQuery(raw string) string {
	if b := beforeQuery(raw); b != raw {
		return b + "?..."
	}
	return raw
}
