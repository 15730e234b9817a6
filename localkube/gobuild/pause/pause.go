// pause holds a Pod's namespaces for the node tier's sandbox image (see docs/real-node.md).
//
// Why our own: no image registry is reachable, so registry.k8s.io/pause cannot be pulled. Like
// upstream's pause.c it sleeps until SIGINT/SIGTERM and, as PID 1 of the Pod, reaps zombies.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
