// Package privatefile writes files only their owner may read (access
// files, a restore's journal), atomically: a reader sees the old file or
// the new one, never a part.
package privatefile

import (
	"os"
	"path/filepath"
)

// Write writes content to path with mode 0600, through a temporary file in
// the same directory renamed over it; the directory must exist.
func Write(path string, content []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // gone after a successful rename
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
