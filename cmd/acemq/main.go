package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// The first signal stops the command the safe way (a replay finishes
	// the message it took, within its publish timeout); a second one ends
	// the process at once. This goroutine ends with the process.
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "acemq: interrupted again: exiting now (a message being moved may now be in its target and, once the broker sees the connection gone, back in its queue too)")
		os.Exit(exitInterrupted)
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	os.Exit(code)
}
