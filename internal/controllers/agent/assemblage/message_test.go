package assemblage

import (
	"strings"
	"testing"
	"unicode/utf8"

	. "github.com/onsi/gomega"
)

func TestAnOverlongSyncMessageIsClippedToWhatTheStatusAccepts(t *testing.T) {
	g := NewWithT(t)
	g.Expect(clipMessage("short")).To(Equal("short"))
	exact := strings.Repeat("a", maxMessage)
	g.Expect(clipMessage(exact)).To(Equal(exact))
	// A multi-byte rune straddling the limit is dropped whole.
	long := strings.Repeat("a", maxMessage-4) + strings.Repeat("é", 100)
	clipped := clipMessage(long)
	g.Expect(len(clipped)).To(BeNumerically("<=", maxMessage))
	g.Expect(utf8.ValidString(clipped)).To(BeTrue())
	g.Expect(clipped).To(HavePrefix(strings.Repeat("a", maxMessage-4)))
	g.Expect(clipped).To(HaveSuffix("…"))
}
