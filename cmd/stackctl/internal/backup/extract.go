package backup

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"

	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// maxSmallMember bounds the members read into memory (the manifest, the
// state, the stack file): a state export of a large stack is megabytes.
const maxSmallMember = 256 << 20

// Extracted is a backup read back: its manifest, the snapshot in a file of
// a private directory, the state and the stack file.
type Extracted struct {
	Manifest     Manifest
	SnapshotPath string
	State        []byte
	StackFile    []byte
}

// Extract decrypts the backup name with ids into dir (a private directory
// the caller removes) and checks it whole: the manifest's format, the
// snapshot's size, its sha256 and etcd's own hash, and that every member is
// there. A backup that fails any check is refused: a restore never starts
// from a partial one.
func Extract(ctx context.Context, store Store, name string, ids []age.Identity, dir string) (Extracted, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(store.Get(ctx, name, ids, pw)) }()
	defer func() { _ = pr.Close() }()
	x, err := readArchive(pr, dir)
	if err == nil {
		// Read to the end of the decryption: the archive's end says
		// nothing of what follows it, and age's last check is there.
		if _, err = io.Copy(io.Discard, pr); err != nil {
			err = fmt.Errorf("the backup does not decrypt to its end: %w", err)
		}
	}
	if err != nil {
		return Extracted{}, fmt.Errorf("unable to read backup %s: %w", name, err)
	}
	return x, nil
}

func readArchive(r io.Reader, dir string) (Extracted, error) {
	var x Extracted
	seen := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return x, fmt.Errorf("the archive is damaged: %w", err)
		}
		if seen[h.Name] {
			return x, fmt.Errorf("the archive holds %s twice", h.Name)
		}
		seen[h.Name] = true
		switch {
		case h.Name == ManifestFile:
			b, err := readSmall(tr, h)
			if err != nil {
				return x, err
			}
			if err := json.Unmarshal(b, &x.Manifest); err != nil {
				return x, fmt.Errorf("the manifest is not JSON: %w", err)
			}
			if x.Manifest.FormatVersion < 1 || x.Manifest.FormatVersion > FormatVersion {
				return x, fmt.Errorf("the backup's format %d is not one this version reads (1-%d): use a newer stackctl", x.Manifest.FormatVersion, FormatVersion)
			}
		case h.Name == SnapshotFile:
			if !seen[ManifestFile] {
				return x, errors.New("the archive has no manifest before the snapshot")
			}
			path, err := writeSnapshot(tr, dir, x.Manifest.Snapshot)
			if err != nil {
				return x, err
			}
			x.SnapshotPath = path
		case h.Name == StateFile:
			if x.State, err = readSmall(tr, h); err != nil {
				return x, err
			}
		case seen[ManifestFile] && h.Name == stackFileMember(x.Manifest.StackFileName):
			if x.StackFile, err = readSmall(tr, h); err != nil {
				return x, err
			}
		default:
			return x, fmt.Errorf("the archive holds an unknown member %q", h.Name)
		}
	}
	switch {
	case !seen[ManifestFile]:
		return x, errors.New("the archive has no manifest")
	case x.SnapshotPath == "":
		return x, errors.New("the archive has no etcd snapshot")
	case !seen[StateFile] || int64(len(x.State)) != x.Manifest.StateSize:
		return x, fmt.Errorf("the archive's state is missing or not the %d bytes its manifest says", x.Manifest.StateSize)
	case x.StackFile == nil:
		return x, errors.New("the archive has no stack file")
	}
	return x, nil
}

func readSmall(tr *tar.Reader, h *tar.Header) ([]byte, error) {
	if h.Size > maxSmallMember {
		return nil, fmt.Errorf("%s is %d bytes, more than a backup's %s can be", h.Name, h.Size, h.Name)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		return nil, fmt.Errorf("unable to read %s: %w", h.Name, err)
	}
	return b, nil
}

// writeSnapshot writes the snapshot into dir (0600) and checks it against
// the manifest and etcd's hash.
func writeSnapshot(tr io.Reader, dir string, want SnapshotInfo) (string, error) {
	path := filepath.Join(dir, SnapshotFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600) //nolint:gosec // the caller's private directory
	if err != nil {
		return "", fmt.Errorf("unable to create the snapshot file: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), tr)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("unable to write the snapshot file: %w", err)
	}
	if n != want.Size || hex.EncodeToString(h.Sum(nil)) != want.SHA256 {
		return "", fmt.Errorf("the etcd snapshot is not the one the manifest names (%d bytes, sha256 %s): %w", want.Size, want.SHA256, talosapi.ErrSnapshotCorrupt)
	}
	in, err := os.Open(path) //nolint:gosec // our own file
	if err != nil {
		return "", fmt.Errorf("unable to read the snapshot file: %w", err)
	}
	defer func() { _ = in.Close() }()
	if _, err := talosapi.VerifySnapshot(in); err != nil {
		return "", err
	}
	return path, nil
}

// ExtractInCluster decrypts the in-cluster snapshot name (age, as talos-backup
// writes it) into dir and checks it as etcd's restore will, with the state and
// stack file from the stack's backup full. The snapshot must be of that backup's
// cluster instance: another instance's Secrets use a key its secrets cannot read.
func ExtractInCluster(ctx context.Context, store Store, full, name string, created time.Time, ids []age.Identity, dir string) (Extracted, error) {
	x, err := Extract(ctx, store, full, ids, dir)
	if err != nil {
		return Extracted{}, err
	}
	want := certs.InstanceID(x.Manifest.TalosCA)
	got := InClusterInstance(x.Manifest.Stack, name)
	switch {
	case got == "":
		return Extracted{}, fmt.Errorf("in-cluster snapshot %s was written before the snapshots were put under their cluster instance: which cluster's secrets it needs cannot be told, so it is not paired with backup %s; restore a backup (make backups lists them)", name, full)
	case want == "":
		return Extracted{}, fmt.Errorf("backup %s does not record its Talos CA, so no in-cluster snapshot can be paired with it; restore the backup itself, or take a new one (make backup)", full)
	case got != want:
		return Extracted{}, fmt.Errorf("in-cluster snapshot %s is of cluster instance %s, backup %s of %s (another Talos CA: the stack was destroyed and made again in between): its Kubernetes secrets could not be read with the backup's; restore a backup of instance %s, or the backup itself", name, got, full, want, got)
	}
	path := filepath.Join(dir, "in-cluster.snapshot")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600) //nolint:gosec // the caller's private directory
	if err != nil {
		return Extracted{}, fmt.Errorf("unable to create the snapshot file: %w", err)
	}
	h := sha256.New()
	err = store.Get(ctx, name, ids, io.MultiWriter(f, h))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Extracted{}, fmt.Errorf("unable to read snapshot %s: %w", name, err)
	}
	in, err := os.Open(path) //nolint:gosec // our own file
	if err != nil {
		return Extracted{}, fmt.Errorf("unable to read the snapshot file: %w", err)
	}
	defer func() { _ = in.Close() }()
	size, err := talosapi.VerifySnapshot(in)
	if err != nil {
		return Extracted{}, fmt.Errorf("unable to read snapshot %s: %w", name, err)
	}
	x.SnapshotPath = path
	x.Manifest.Snapshot = SnapshotInfo{Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}
	x.Manifest.Created, x.Manifest.SourceNode = created.UTC(), InClusterDir
	return x, nil
}
