package backupstore_test

import (
	"fmt"
	"io"
	"testing"

	"filippo.io/age"

	"github.com/fluodata/talos-pulumi/internal/backupstore"
)

// BenchmarkPut encrypts and writes a 64 MiB backup to a file target: the
// cost of a backup is the cost of age plus a disk write. The MB/s column
// is the throughput of the plain bytes.
func BenchmarkPut(b *testing.B) {
	const size = 64 << 20
	s, err := backupstore.Open(b.Context(), "file://"+b.TempDir(), backupstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	to := []age.Recipient{x25519(b).Recipient()}
	b.SetBytes(size)
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("bench/%d.tar.age", i)
		i++
		if _, err := s.Put(b.Context(), name, io.LimitReader(zeros{}, size), to, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Delete(b.Context(), name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkGet decrypts a 64 MiB backup from a file target: a restore's
// cost before the data is used.
func BenchmarkGet(b *testing.B) {
	const size = 64 << 20
	s, err := backupstore.Open(b.Context(), "file://"+b.TempDir(), backupstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	id := x25519(b)
	if _, err := s.Put(b.Context(), "bench/get.tar.age", io.LimitReader(zeros{}, size), []age.Recipient{id.Recipient()}, nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		if err := s.Get(b.Context(), "bench/get.tar.age", []age.Identity{id}, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
