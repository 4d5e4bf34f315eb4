//go:build !linux

package realapiserver

import "syscall"

// sysProcAttr: only Linux kills a child with its parent; elsewhere the
// API server is stopped by the test's Cleanup alone.
func sysProcAttr() *syscall.SysProcAttr { return nil }
