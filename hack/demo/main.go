// Command demo is `make demo`: the whole fleet on this machine (see package
// internal/demo), shown converging, then kept running until Ctrl-C. With
// --exit-when-ready it stops and exits 0 once every cluster is Ready.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fleeet-dev/fleeet/internal/demo"
)

func main() {
	exit := flag.Bool("exit-when-ready", false, "Stop everything and exit 0 once the fleet has converged.")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "fleeet-demo"), "Where kubeconfigs, data and component logs go.")
	timeout := flag.Duration("timeout", 10*time.Minute, "How long the fleet may take to converge.")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, *dir, *exit, *timeout))
}

func run(ctx context.Context, dir string, exit bool, timeout time.Duration) int {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h, err := demo.NewHarness(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		fmt.Println("stopping every component")
		h.Close()
	}()
	var fleet *demo.Fleet
	err = h.Run(func() {
		fleet = demo.Start(h, os.Stdout)
	})
	if err == nil {
		err = fleet.WaitConverged(ctx, timeout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo failed: %v\n(component logs and %s are under %s)\n", err, "harness.log", dir)
		return 1
	}
	if exit {
		return 0
	}
	fleet.Guide(ctx, os.Stdout, dir)
	fmt.Println("\nPress Ctrl-C to stop.")
	<-ctx.Done()
	return 0
}
