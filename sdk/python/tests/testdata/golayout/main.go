// Command golayout prints sessiond's default socket for the environment it
// runs in, so the Python tests can compare sessiond_store.default_socket
// with the Go original. Under testdata/: no ./... pattern builds it.
package main

import (
	"fmt"
	"os"

	"github.com/sessiond/sessiond/internal/layout"
)

func main() {
	fmt.Print(layout.DefaultSocket(os.Getenv))
}
