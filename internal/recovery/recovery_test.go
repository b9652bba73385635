package recovery

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestASignatureCoversEveryField: a request verifies only under the key that
// signed it and only as signed; changing any field, or signing with another
// key, breaks it.
func TestASignatureCoversEveryField(t *testing.T) {
	g := NewWithT(t)
	current, err := NewKey()
	g.Expect(err).NotTo(HaveOccurred())
	next, err := NewKey()
	g.Expect(err).NotTo(HaveOccurred())
	public, err := ParsePublicKey(PublicKey(current))
	g.Expect(err).NotTo(HaveOccurred())
	req := NewRequest("team-a", "edge-1", current, next, time.Now())
	g.Expect(req.verify(public)).To(BeTrue())

	for name, change := range map[string]func(*Request){
		"namespace": func(r *Request) { r.Namespace = "team-b" },
		"remote":    func(r *Request) { r.Remote = "edge-2" },
		"newKey":    func(r *Request) { r.NewKey = PublicKey(current) },
		"timestamp": func(r *Request) { r.Timestamp = r.Timestamp.Add(time.Second) },
	} {
		changed := req
		change(&changed)
		g.Expect(changed.verify(public)).To(BeFalse(), name)
	}
	other, err := ParsePublicKey(req.NewKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req.verify(other)).To(BeFalse(), "signed by the current key, not the next")
}

// TestKeysRoundTripAndBadOnesAreRefused: a stored private key reads back as
// the same key; anything else is refused without echoing it.
func TestKeysRoundTripAndBadOnesAreRefused(t *testing.T) {
	g := NewWithT(t)
	key, err := NewKey()
	g.Expect(err).NotTo(HaveOccurred())
	back, err := DecodePrivate(EncodePrivate(key))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back.Equal(key)).To(BeTrue())

	for _, bad := range []string{"", "not base64!", "c2hvcnQ="} {
		_, err := DecodePrivate([]byte(bad))
		g.Expect(err).To(MatchError("not a base64 Ed25519 seed"), bad)
		_, err = ParsePublicKey(bad)
		g.Expect(err).To(MatchError("not a base64 Ed25519 public key"), bad)
	}
}
