package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
)

// destroyFlagsCmd prints the flags `make destroy` gives `pulumi destroy`
// for the state `pulumi stack export` prints on stdin: --run-program while
// the stack holds a resource of a provider, nothing otherwise
// (driver.DestroyRunsProgram says why).
func destroyFlagsCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("destroy-flags", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "usage: pulumi stack export --stack NAME | stackctl destroy-flags")
		return exitcode.Usage
	}
	state, err := io.ReadAll(stdin)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl destroy-flags: unable to read the state: %v\n", err)
		return exitcode.Failed
	}
	withProgram, err := driver.DestroyRunsProgram(state)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl destroy-flags: %v\n", err)
		return exitcode.Failed
	}
	if withProgram {
		_, _ = fmt.Fprintln(stdout, driver.RunProgramFlag)
	}
	return exitcode.OK
}
