package proxmox

import (
	"fmt"
	"path"
	"strings"

	"github.com/fluodata/talos-pulumi/internal/shell"
)

// Reservation is one DHCP reservation: the VM's MAC gets the node's IP and
// name.
type Reservation struct {
	MAC, IP, Hostname string
}

// DNSMasqFile describes this cluster's reservation file on the Proxmox host.
type DNSMasqFile struct {
	// Dir is the directory dnsmasq reads extra config from (conf-dir).
	Dir string
	// Cluster and Stack name the file's owner, in its name and header.
	Cluster, Stack string
	// TestArgs are extra arguments of the whole-configuration check (tests
	// point it at a scratch main file; on a host the default one counts).
	TestArgs string
	// Restart makes the running dnsmasq read the file. dnsmasq rereads only
	// hosts files on SIGHUP, not dhcp-host lines in config files, so the
	// default is a restart.
	Restart string
}

// Path is the file's path on the host: named after the cluster, so an
// operator listing the directory sees whose it is.
func (f DNSMasqFile) Path() string { return path.Join(f.Dir, "talos-"+f.Cluster+".conf") }

// Render returns the file's content: a header saying who owns it and one
// dhcp-host line per node. The caller has validated every value.
func (f DNSMasqFile) Render(rs []Reservation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# DHCP reservations of Talos cluster %q, managed by Pulumi stack %q.\n", f.Cluster, f.Stack)
	b.WriteString("# Edits are overwritten by `pulumi up`; `pulumi destroy` removes this file.\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "dhcp-host=%s,%s,%s\n", r.MAC, r.IP, r.Hostname)
	}
	return b.String()
}

// InstallScript is the POSIX shell script that installs the new file (read
// from stdin) on the host. It never leaves a broken file live:
//  1. the new file alone must pass `dnsmasq --test`;
//  2. it then replaces the live file, and the whole configuration (the main
//     file plus the conf-dir, which Debian's service adds on its command
//     line rather than in dnsmasq.conf) must pass `dnsmasq --test`; if not,
//     the previous file (or none) is put back;
//  3. only then is dnsmasq restarted.
//
// The running dnsmasq is never restarted with an unchecked file. The staging
// file lives outside the conf-dir, which dnsmasq would read whatever its name.
func (f DNSMasqFile) InstallScript() string {
	return f.preamble() + `new=$(mktemp "${TMPDIR:-/tmp}/talos-dnsmasq.XXXXXX")
old=$(mktemp "${TMPDIR:-/tmp}/talos-dnsmasq.XXXXXX")
trap 'rm -f "$new" "$old"' EXIT
cat > "$new"
if ! out=$(dnsmasq --test --conf-file="$new" 2>&1); then
	echo "dnsmasq --test rejected the new reservations; $file is unchanged: $out" >&2
	exit 1
fi
had_old=0
if [ -e "$file" ]; then cp -p "$file" "$old"; had_old=1; fi
chmod 0644 "$new"
cp "$new" "$file.tmp" && mv -f "$file.tmp" "$file"
if ! out=$(dnsmasq --test $test_args --conf-dir="$dir" 2>&1); then
	if [ "$had_old" = 1 ]; then cp -p "$old" "$file.tmp" && mv -f "$file.tmp" "$file"; else rm -f "$file"; fi
	echo "dnsmasq --test rejected the configuration with the new reservations; $file is back as it was: $out" >&2
	exit 1
fi
` + f.restart("installed")
}

// RemoveScript deletes the file and restarts dnsmasq; a file already gone is
// success, so a repeated destroy does not fail.
func (f DNSMasqFile) RemoveScript() string {
	return f.preamble() + `if [ ! -e "$file" ]; then
	echo "$file is already gone"
	exit 0
fi
rm -f "$file"
` + f.restart("removed")
}

func (f DNSMasqFile) preamble() string {
	return fmt.Sprintf("set -eu\ndir=%s\nfile=%s\ntest_args=%s\n", shell.Quote(f.Dir), shell.Quote(f.Path()), shell.Quote(f.TestArgs))
}

func (f DNSMasqFile) restart(done string) string {
	return fmt.Sprintf(`if ! out=$( { %s
} 2>&1); then
	echo "$file %s, but restarting dnsmasq failed: $out" >&2
	exit 1
fi
echo "$file %s; dnsmasq restarted"
`, f.Restart, done, done)
}

// shellQuote quotes s for POSIX sh.
