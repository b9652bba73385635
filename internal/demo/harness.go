package demo

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Harness runs the test harness's components outside a test: it keeps
// their files under one directory, their diagnostics in a log file, and
// stops them, last started first, on Close.
type Harness struct {
	ctx context.Context
	dir string
	log *log.Logger

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	dirs     int
}

// failure is what Fatal panics with; Run recovers it as an error.
type failure struct{ Message string }

func (f failure) Error() string { return f.Message }

// NewHarness keeps files under dir and writes diagnostics to dir/harness.log.
func NewHarness(ctx context.Context, dir string) (*Harness, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "harness.log"))
	if err != nil {
		return nil, err
	}
	h := &Harness{ctx: ctx, dir: dir, log: log.New(f, "", log.LstdFlags)}
	h.cleanups = append(h.cleanups, func() { _ = f.Close() })
	// envtest and the clients log through controller-runtime's logger.
	ctrl.SetLogger(zap.New(zap.WriteTo(f)))
	return h, nil
}

func (h *Harness) Helper()                  {}
func (h *Harness) Context() context.Context { return h.ctx }

func (h *Harness) Cleanup(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cleanups = append(h.cleanups, f)
}

func (h *Harness) TempDir() string {
	h.mu.Lock()
	h.dirs++
	dir := filepath.Join(h.dir, fmt.Sprintf("%03d", h.dirs))
	h.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.Fatal(err)
	}
	return dir
}

func (h *Harness) Fatal(args ...any) { h.fail(fmt.Sprint(args...)) }

func (h *Harness) Fatalf(format string, args ...any) { h.fail(fmt.Sprintf(format, args...)) }

func (h *Harness) fail(msg string) {
	h.mu.Lock()
	h.failed = true
	h.mu.Unlock()
	h.log.Print("FATAL: ", msg)
	panic(failure{msg})
}

func (h *Harness) Errorf(format string, args ...any) {
	h.mu.Lock()
	h.failed = true
	h.mu.Unlock()
	h.log.Printf("ERROR: "+format, args...)
}

func (h *Harness) Logf(format string, args ...any) { h.log.Printf(format, args...) }

func (h *Harness) Failed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failed
}

// Run calls f, turning a Fatal inside it into an error.
func (h *Harness) Run(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(failure)
			if !ok {
				panic(r)
			}
			err = e
		}
	}()
	f()
	return nil
}

// Close runs the cleanups, last registered first.
func (h *Harness) Close() {
	h.mu.Lock()
	cleanups := slices.Clone(h.cleanups)
	h.cleanups = nil
	h.mu.Unlock()
	for _, f := range slices.Backward(cleanups) {
		f()
	}
}
