// Package recovery lets a pull cluster whose credential the management
// cluster rejects (it expired while the cluster was offline, or the
// management cluster has a new service-account signing key or was rebuilt)
// get a new one without a person: the cluster proves it holds the private
// half of the Ed25519 key its Remote names (fleeetv1.RecoveryKeyAnnotation)
// to the fleet manager's recovery endpoint, which rotates that key and
// hands back a first credential, exactly as after registration. A
// ServiceAccount token cannot serve: every one dies with the signing key.
package recovery

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Path is where the recovery endpoint answers POSTed Requests.
const Path = "/v1/recover"

// PrivateKeyKey is the key of the cluster's recovery private key (its
// seed, standard base64) in the agent's credential Secret; it never leaves
// the downstream cluster.
const PrivateKeyKey = "recoveryKey"

// Request asks to rotate a Remote's recovery key to NewKey and for a first
// credential; Signature is the current key's over every other field.
type Request struct {
	Namespace string    `json:"namespace"`
	Remote    string    `json:"remote"`
	NewKey    string    `json:"newKey"`
	Timestamp time.Time `json:"timestamp"`
	Signature []byte    `json:"signature"`
}

// Response carries the first credential of the recovered cluster's
// identity, to be exchanged at once for one the cluster mints itself.
type Response struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// NewKey generates a recovery key.
func NewKey() (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	return key, err
}

// EncodePrivate is how a private key is stored downstream.
func EncodePrivate(key ed25519.PrivateKey) []byte {
	return []byte(base64.StdEncoding.EncodeToString(key.Seed()))
}

// DecodePrivate reads a key stored with EncodePrivate.
func DecodePrivate(data []byte) (ed25519.PrivateKey, error) {
	seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, errors.New("not a base64 Ed25519 seed")
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// PublicKey is the annotation value naming key.
func PublicKey(key ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
}

// ParsePublicKey reads an annotation value written with PublicKey.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return nil, errors.New("not a base64 Ed25519 public key")
	}
	return key, nil
}

// NewRequest asks to rotate Remote ns/remote's recovery key from current to
// next, signed with current at now.
func NewRequest(ns, remote string, current, next ed25519.PrivateKey, now time.Time) Request {
	req := Request{Namespace: ns, Remote: remote, NewKey: PublicKey(next), Timestamp: now.UTC()}
	req.Signature = ed25519.Sign(current, req.message())
	return req
}

// verify checks the request was signed by the holder of key.
func (r Request) verify(key ed25519.PublicKey) bool {
	return ed25519.Verify(key, r.message(), r.Signature)
}

// message is what the signature covers: every field, each unambiguous
// (names are DNS labels, the key base64), under a label of this protocol so
// the signature means nothing elsewhere.
func (r Request) message() []byte {
	return fmt.Appendf(nil, "fleeet-recovery-v1\n%s\n%s\n%s\n%s", r.Namespace, r.Remote, r.NewKey, r.Timestamp.UTC().Format(time.RFC3339Nano))
}
