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
	// LeaseFile is dnsmasq's lease database (dhcp-leasefile). A lease there
	// outlives the VM that took it: dnsmasq will not hand a reserved address
	// to its MAC while another MAC holds an unexpired lease on it, so the
	// scripts drop such leases (see leaseFunctions).
	LeaseFile string
	// Interface is where the VMs' DHCP requests reach dnsmasq (the Proxmox
	// bridge); dhcp_release sends its DHCPRELEASE in through it.
	Interface string
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

// InstallScript is the POSIX shell script that installs the new file (from
// stdin) on the host without ever leaving a broken file live: the new file,
// then the whole configuration, must pass `dnsmasq --test` (else the previous
// file is put back), the leases that would keep a node from its reserved
// address are released, and only then is dnsmasq restarted
// (docs/decisions/0004-upstream-behaviours.md#dnsmasq-keeps-its-leases-in-memory).
func (f DNSMasqFile) InstallScript() string {
	return f.preamble() + `new=$tmp/new
old=$tmp/old
: > "$old" || fail "unable to create $old"
cat > "$new" || fail "unable to write the new reservations to $new"
if ! out=$(dnsmasq --test --conf-file="$new" 2>&1); then
	fail "dnsmasq --test rejected the new reservations; $file is unchanged: $out"
fi
had_old=0
if [ -e "$file" ]; then
	cp -p "$file" "$old" || fail "unable to back up $file to $old; $file is unchanged"
	had_old=1
fi
chmod 0644 "$new" || fail "unable to make $new readable; $file is unchanged"
# replace SRC puts a copy of SRC in place of $file through $file.tmp (same
# directory, so the mv is atomic); a failed step removes $file.tmp, which
# dnsmasq would read from the conf-dir like any other file. cp and mv succeed
# into a directory of either name, leaving no file in place: a directory at
# $file is refused, one at $file.tmp fails its removal, and the copy is
# compared before it goes live.
replace() {
	if [ -d "$file" ]; then
		echo "$file is a directory" >&2
		return 1
	fi
	if rm -f "$file.tmp" && cp -p "$1" "$file.tmp" && cmp -s "$1" "$file.tmp" && mv -f "$file.tmp" "$file"; then
		return 0
	fi
	rm -f "$file.tmp"
	return 1
}
replace "$new" || fail "unable to write $file through $file.tmp; $file is unchanged"
put_back() {
	if [ "$had_old" = 1 ]; then
		replace "$old"
	else
		rm -f "$file"
	fi
}
if ! out=$(dnsmasq --test $test_args --conf-dir="$dir" 2>&1); then
	if ! put_back; then
		fail "dnsmasq --test rejected the configuration with the new reservations, and unable to put the previous $file back (it holds the rejected reservations): $out"
	fi
	fail "dnsmasq --test rejected the configuration with the new reservations; $file is back as it was: $out"
fi
release_leases "$new" "$old" "$file is installed"
` + f.restart("installed")
}

// RemoveScript deletes the file, releases the leases of its reservations and
// restarts dnsmasq; a file already gone is success, so a repeated destroy
// does not fail. The leases go before the file, so that a failure leaves the
// file in place and a retried destroy still knows which leases to release.
func (f DNSMasqFile) RemoveScript() string {
	return f.preamble() + `if [ ! -e "$file" ]; then
	echo "$file is already gone"
	exit 0
fi
none=$tmp/none
old=$tmp/old
: > "$none" || fail "unable to create $none"
cp -p "$file" "$old" || fail "unable to copy $file to $old; $file is still in place"
release_leases "$none" "$old" "$file is still in place"
rm -f "$file" || fail "unable to remove $file"
` + f.restart("removed")
}

func (f DNSMasqFile) preamble() string {
	return fmt.Sprintf("set -eu\ndir=%s\nfile=%s\ntest_args=%s\nlease_file=%s\niface=%s\n",
		shell.Quote(f.Dir), shell.Quote(f.Path()), shell.Quote(f.TestArgs), shell.Quote(f.LeaseFile), shell.Quote(f.Interface)) +
		`fail() {
	echo "$*" >&2
	exit 1
}
if ! tmp=$(mktemp -d "${TMPDIR:-/tmp}/talos-dnsmasq.XXXXXX"); then
	fail "unable to create a scratch directory in ${TMPDIR:-/tmp}"
fi
trap 'rm -rf "$tmp"' EXIT
` + leaseFunctions
}

// leaseFunctions are the shell functions both scripts release leases with. A
// lease is stale when it holds an address the new file reserves for another
// MAC, or is the lease of a reservation the new file drops; others stay. Stale
// leases are released with dhcp_release (best effort) and removed from the
// lease file in place (which must work) before the restart
// (docs/decisions/0004-upstream-behaviours.md#dnsmasq-keeps-its-leases-in-memory).
const leaseFunctions = `# leases MODE NEW OLD < lease file: MODE stale prints the stale leases, keep
# the others.
leases() {
	awk -v mode="$1" -v newf="$2" -v oldf="$3" '
function load(f, m,    line, n, p, r) {
	while ((r = (getline line < f)) > 0) {
		if (line !~ /^dhcp-host=/) continue
		n = split(substr(line, 11), p, ",")
		if (n >= 2) m[p[2]] = tolower(p[1])
	}
	if (r < 0) {
		print "unable to read " f > "/dev/stderr"
		exit 2
	}
	close(f)
}
BEGIN { load(newf, reserved); load(oldf, dropped) }
{
	stale = 0
	if (NF >= 3) {
		ip = $3
		mac = tolower($2)
		if (ip in reserved) stale = reserved[ip] != mac
		else if (ip in dropped) stale = dropped[ip] == mac
	}
	if ((mode == "stale") == stale) print
}'
}
# release_one IP MAC CLIENTID: dhcp_release takes the client id the lease
# was made with, "*" (none) left out.
release_one() {
	if [ -n "$3" ] && [ "$3" != "*" ]; then
		dhcp_release "$iface" "$1" "$2" "$3"
	else
		dhcp_release "$iface" "$1" "$2"
	fi
}
# release_leases NEW OLD STATE: releases the stale leases; STATE says where
# the reservation file stands if this fails.
release_leases() {
	if [ ! -e "$lease_file" ]; then
		echo "$lease_file does not exist: no DHCP leases to release"
		return 0
	fi
	if ! stale=$(leases stale "$1" "$2" < "$lease_file"); then
		fail "unable to read the DHCP leases in $lease_file; $3, dnsmasq was not restarted"
	fi
	if [ -z "$stale" ]; then
		return 0
	fi
	if command -v dhcp_release > /dev/null 2>&1; then
		printf '%s\n' "$stale" | while read -r _ mac ip _ clid; do
			if ! out=$(release_one "$ip" "$mac" "$clid" 2>&1); then
				echo "dhcp_release on $iface of $ip ($mac) failed, the edit of $lease_file drops the lease instead: $out" >&2
			fi
		done
	else
		echo "dhcp_release (Debian package dnsmasq-utils) is not installed: the edit of $lease_file and the restart drop the stale leases"
	fi
	# Recomputed: dnsmasq may have rewritten the file after a release.
	if ! leases keep "$1" "$2" < "$lease_file" > "$tmp/leases"; then
		fail "unable to read the DHCP leases in $lease_file; $3, dnsmasq was not restarted"
	fi
	if ! cat "$tmp/leases" > "$lease_file"; then
		fail "unable to rewrite $lease_file; $3, dnsmasq was not restarted"
	fi
	printf '%s\n' "$stale" | while read -r _ mac ip _; do
		echo "dropped the DHCP lease of $ip to $mac"
	done
}
`

// restart runs the restart command in a shell of its own (sh -c), so that
// whatever it holds runs as that command and cannot end or reshape the
// script around it.
func (f DNSMasqFile) restart(done string) string {
	return fmt.Sprintf(`if ! out=$(sh -c %s 2>&1); then
	echo "$file %s, but restarting dnsmasq failed: $out" >&2
	exit 1
fi
echo "$file %s; dnsmasq restarted"
`, shell.Quote(f.Restart), done, done)
}
