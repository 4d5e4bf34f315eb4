package realapiserver

import "syscall"

// sysProcAttr has the kernel kill the API server when the test binary dies
// (a test's timeout panics past every Cleanup): no server outlives its
// test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
