package testenv

import (
	"sync"
	"testing"

	"github.com/onsi/gomega"
)

// Assertions is gomega.NewWithT for a test that starts components: when an
// assertion fails, its message is said again once every cleanup has run, so
// that it ends the output instead of being buried under the components' logs
// (CI shows only the end).
func Assertions(t *testing.T) *gomega.WithT {
	t.Helper()
	var (
		mu    sync.Mutex
		first string
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if first != "" {
			t.Logf("the test failed at its first failed assertion:\n%s", first)
		}
	})
	g := gomega.NewWithT(t)
	fail := g.Fail
	g.Fail = func(message string, callerSkip ...int) {
		t.Helper()
		mu.Lock()
		if first == "" {
			first = message
		}
		mu.Unlock()
		fail(message, callerSkip...)
	}
	return g
}
