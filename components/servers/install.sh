#!/usr/bin/env bash
# Writes a Talos disk image to a server's disk from the provider's rescue system.
#
# `pulumi up` runs it once per node over SSH (bash reads it on stdin, after a
# preamble that sets the variables below); tests run it locally against a plain
# file. It prints progress on stdout and every refusal or failure on stderr, and
# never prints or needs the rescue password.
#
# Variables:
#   TARGET          disk to write, e.g. /dev/sda or /dev/disk/by-id/... (required)
#   IMAGE_URL       raw disk image, .raw, .raw.zst, .raw.xz or .raw.gz; http(s) URL
#                   or file:// / plain path (required). A query string (a presigned
#                   URL) is kept: the suffix is read before it, and logs leave it out
#   REQUIRE_RESCUE  1 (default): refuse unless this system runs from RAM or the network,
#                   or its host name says rescue
#   PROC_DIR, SYS_DIR     where /proc and /sys are (tests point them at fixtures)
#   ALLOW_FILE_TARGET     1 lets TARGET be a regular file (tests only)
#   PROGRESS_INTERVAL     seconds between progress lines (default 10)
#   POLL_INTERVAL         seconds between checks that the write has finished (default 1;
#                         tests use a fraction such as 0.01, which sleep takes)
#   SYNC_ALL              1 (default): sync every file system after the write, before the
#                         reboot; 0 leaves it at dd's fsync of the disk (tests: a system-wide
#                         sync waits for every other writer of the machine)
set -euo pipefail

PROC_DIR=${PROC_DIR:-/proc}
SYS_DIR=${SYS_DIR:-/sys}
REQUIRE_RESCUE=${REQUIRE_RESCUE:-1}
ALLOW_FILE_TARGET=${ALLOW_FILE_TARGET:-0}
PROGRESS_INTERVAL=${PROGRESS_INTERVAL:-10}
POLL_INTERVAL=${POLL_INTERVAL:-1}
SYNC_ALL=${SYNC_ALL:-1}

log() { printf 'talos-install: %s\n' "$*"; }
die() {
	printf 'talos-install: refused: %s\n' "$*" >&2
	exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

# check_rescue refuses to run on a system that booted from a disk: writing the
# image there would overwrite the running system or an installed OS by mistake.
check_rescue() {
	local root_dev root_fs host
	read -r root_dev root_fs < <(awk '$2 == "/" { dev = $1; fs = $3 } END { print dev, fs }' "$PROC_DIR/mounts")
	host=$(cat "$PROC_DIR/sys/kernel/hostname" 2>/dev/null || hostname 2>/dev/null || echo unknown)
	case "$root_fs" in
	tmpfs | ramfs | rootfs | overlay | nfs | nfs4 | squashfs | aufs)
		log "rescue system: / is $root_fs (runs from RAM or the network), host $host"
		return
		;;
	esac
	case "$root_dev" in
	/dev/ram* | /dev/loop* | /dev/zram* | /dev/nfs)
		log "rescue system: / is on $root_dev, host $host"
		return
		;;
	esac
	case "$host" in
	*rescue*)
		log "rescue system: host name $host"
		return
		;;
	esac
	die "this does not look like a rescue system: / is $root_fs on $root_dev and the host name is '$host'. Boot the server into the provider's rescue mode first (or set vps.requireRescue: false if your rescue system runs from a disk)."
}

# in_use prints why the disk (or one of its partitions) is in use, if it is.
in_use() {
	local disk=$1 name
	name=$(basename "$disk")
	awk -v d="$disk" '
		index($1, d) == 1 && (length($1) == length(d) || substr($1, length(d) + 1) ~ /^p?[0-9]+$/) {
			print $1 " is mounted on " $2; found = 1; exit
		}' "$PROC_DIR/mounts"
	if [ -r "$PROC_DIR/swaps" ]; then
		awk -v d="$disk" 'NR > 1 && index($1, d) == 1 { print $1 " is active swap"; exit }' "$PROC_DIR/swaps"
	fi
	local holder
	for holder in "$SYS_DIR/block/$name/holders/"* "$SYS_DIR/block/$name/$name"*/holders/*; do
		[ -e "$holder" ] && echo "$(basename "$(dirname "$(dirname "$holder")")") is held by $(basename "$holder") (LVM, RAID or device-mapper)" && return
	done
	return 0
}

check_target() {
	[ -n "${TARGET:-}" ] || die "TARGET (the install disk) is not set"
	[ -e "$TARGET" ] || die "install disk $TARGET does not exist; check the node's installDisk (lsblk lists the disks)"
	DISK=$(readlink -f "$TARGET")
	if [ -b "$DISK" ]; then
		:
	elif [ -f "$DISK" ] && [ "$ALLOW_FILE_TARGET" = 1 ]; then
		:
	else
		die "install disk $TARGET ($DISK) is not a block device"
	fi
	local why
	why=$(in_use "$DISK")
	[ -z "$why" ] || die "install disk $DISK is in use: $why. Unmount it (or stop what holds it) and run 'pulumi up' again."
}

# image_path is IMAGE_URL up to its query or fragment: the part that names
# the file. IMAGE_SHOWN is IMAGE_URL for logs, without a query, which in a
# presigned URL is a credential.
image_path() { printf '%s' "${IMAGE_URL%%[?#]*}"; }
show_image() {
	IMAGE_SHOWN=$(image_path)
	[ "$IMAGE_SHOWN" = "$IMAGE_URL" ] || IMAGE_SHOWN="$IMAGE_SHOWN?..."
}

# pick_decompressor sets DECOMPRESS for IMAGE_URL, switching a factory .zst URL
# to .xz when this system has no zstd (the factory serves both). The format
# comes from the path, so a presigned URL's query string does not hide it.
pick_decompressor() {
	show_image
	case "$(image_path)" in
	*.raw.zst)
		if have zstd; then
			DECOMPRESS="zstd -dc"
		elif ! have xz; then
			die "neither zstd nor xz is installed; set vps.imageUrl to a .raw.gz or .raw image"
		elif [ "$(image_path)" != "$IMAGE_URL" ]; then
			# A query (a presigned URL's signature) is valid for this path only.
			die "zstd is not installed, and the .xz twin of $IMAGE_SHOWN cannot be derived from a URL with a query string; install zstd or set vps.imageUrl to a .raw.xz, .raw.gz or .raw image"
		else
			IMAGE_URL="${IMAGE_URL%.zst}.xz"
			DECOMPRESS="xz -dc"
			show_image
			log "no zstd here: fetching the .xz image instead"
		fi
		;;
	*.raw.xz) have xz || die "xz is not installed; set vps.imageUrl to a .raw.zst, .raw.gz or .raw image"; DECOMPRESS="xz -dc" ;;
	*.raw.gz) DECOMPRESS="gzip -dc" ;;
	*.raw) DECOMPRESS="cat" ;;
	*) die "IMAGE_URL $IMAGE_SHOWN is not a .raw, .raw.zst, .raw.xz or .raw.gz image" ;;
	esac
}

# fetch writes the image at IMAGE_URL to stdout.
fetch() {
	case "$IMAGE_URL" in
	http://* | https://*)
		if have curl; then
			# --globoff: [] and {} in a URL are characters, not curl's ranges.
			curl -fsSL --globoff --retry 3 --connect-timeout 20 "$IMAGE_URL"
		elif have wget; then
			wget -q -O - "$IMAGE_URL"
		else
			die "neither curl nor wget is installed"
		fi
		;;
	file://*) cat "${IMAGE_URL#file://}" ;;
	*) cat "$IMAGE_URL" ;;
	esac
}

# written prints how many bytes have reached the target so far.
written() {
	if [ -b "$DISK" ]; then
		local name now
		name=$(basename "$DISK")
		now=$(awk '{ print $7 }' "$SYS_DIR/block/$name/stat" 2>/dev/null || echo 0)
		echo $(((now - SECTORS_BEFORE) * 512))
	else
		stat -c %s "$DISK"
	fi
}

# wipe_tail clears the last MiB of a block device: a backup GPT or RAID
# superblock from the previous system would otherwise survive and confuse the
# firmware or Talos.
wipe_tail() {
	[ -b "$DISK" ] || return 0
	local size
	size=$(blockdev --getsize64 "$DISK" 2>/dev/null || echo 0)
	[ "$size" -gt 2097152 ] || return 0
	dd if=/dev/zero of="$DISK" bs=1M seek=$((size / 1048576 - 1)) count=1 conv=fsync status=none 2>/dev/null || true
}

write_image() {
	SECTORS_BEFORE=0
	if [ -b "$DISK" ]; then
		SECTORS_BEFORE=$(awk '{ print $7 }' "$SYS_DIR/block/$(basename "$DISK")/stat" 2>/dev/null || echo 0)
	fi
	log "writing $IMAGE_SHOWN to $DISK"
	wipe_tail
	(
		set -o pipefail
		fetch </dev/null | $DECOMPRESS | dd of="$DISK" bs=4M conv=fsync status=none 2>&1
	) &
	# A progress line every PROGRESS_INTERVAL seconds (at 10 s, 20 s, ... by
	# default), the first check that reaches each mark printing it once.
	local pid=$! started=$SECONDS elapsed next_report=$PROGRESS_INTERVAL
	while kill -0 "$pid" 2>/dev/null; do
		sleep "$POLL_INTERVAL"
		elapsed=$((SECONDS - started))
		if ((elapsed >= next_report)) && kill -0 "$pid" 2>/dev/null; then
			log "$(($(written) / 1048576)) MiB written after $elapsed s"
			next_report=$((elapsed - elapsed % PROGRESS_INTERVAL + PROGRESS_INTERVAL))
		fi
	done
	if ! wait "$pid"; then
		printf 'talos-install: failed: download or decompression of %s broke off; the disk holds a partial image. Run pulumi up again to retry.\n' "$IMAGE_SHOWN" >&2
		exit 1
	fi
	if [ "$SYNC_ALL" = 1 ]; then
		sync
	fi
	log "$(($(written) / 1048576)) MiB written in $((SECONDS - started)) s; synced"
	if [ -b "$DISK" ] && have blockdev; then
		blockdev --rereadpt "$DISK" 2>/dev/null || true
	fi
}

# gpt_names prints the partition names of the GPT on DISK, one per line.
gpt_names() {
	local sig lba count size i off
	sig=$(dd if="$DISK" bs=1 skip=512 count=8 status=none 2>/dev/null)
	[ "$sig" = "EFI PART" ] || return 1
	lba=$(od -An -t u8 -j $((512 + 72)) -N 8 "$DISK" | tr -d ' ')
	count=$(od -An -t u4 -j $((512 + 80)) -N 4 "$DISK" | tr -d ' ')
	size=$(od -An -t u4 -j $((512 + 84)) -N 4 "$DISK" | tr -d ' ')
	[ "$count" -le 256 ] && [ "$size" -ge 128 ] || return 1
	for ((i = 0; i < count; i++)); do
		off=$((lba * 512 + i * size))
		# The name is 72 bytes of UTF-16LE at offset 56; Talos names are ASCII.
		dd if="$DISK" bs=1 skip=$((off + 56)) count=72 status=none 2>/dev/null | tr -d '\000'
		echo
	done | grep -v '^$' || true
}

verify() {
	local names
	names=$(gpt_names) || {
		printf 'talos-install: failed: %s has no GPT partition table after the write; the image is not a Talos disk image\n' "$DISK" >&2
		exit 1
	}
	for want in EFI META; do
		grep -qx "$want" <<<"$names" || {
			printf 'talos-install: failed: %s has no %s partition (found: %s); the image is not a Talos disk image\n' "$DISK" "$want" "$(echo "$names" | tr '\n' ' ')" >&2
			exit 1
		}
	done
	log "partition table looks like Talos: $(echo "$names" | tr '\n' ' ')"
}

# check_settings refuses settings the loops below cannot use.
check_settings() {
	case "$PROGRESS_INTERVAL" in '' | 0* | *[!0-9]*) die "PROGRESS_INTERVAL $PROGRESS_INTERVAL is not a whole number of seconds above 0" ;; esac
	case "$POLL_INTERVAL" in '' | . | *[!0-9.]* | *.*.*) die "POLL_INTERVAL $POLL_INTERVAL is not a number of seconds" ;; esac
	case "$SYNC_ALL" in 0 | 1) ;; *) die "SYNC_ALL $SYNC_ALL is neither 0 nor 1" ;; esac
}

main() {
	check_settings
	[ -n "${IMAGE_URL:-}" ] || die "IMAGE_URL is not set"
	if [ "$REQUIRE_RESCUE" = 1 ]; then
		check_rescue
	fi
	check_target
	pick_decompressor
	write_image
	verify
	log "done: switch the server's boot from rescue to its disk and reboot it into Talos"
}

main "$@"
