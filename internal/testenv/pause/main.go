// Command pause is the sandbox ("infra") container of internal/testenv's
// nodes: containerd starts it first in every Pod to hold the Pod's network
// and IPC namespaces open. It does nothing else, reaps nothing, and exits
// when told to with SIGTERM or SIGINT.
//
// testenv builds it into the node's sandbox image, so no image is pulled
// from a registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// As PID 1 of its PID namespace the process gets only the signals it
	// handles, so without these handlers SIGTERM would be ignored.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
