package testenv

import (
	"os"
	"path/filepath"

	"filippo.io/age"
)

// SOPSKey is an age key pair made for one test: manifests are encrypted to
// its public key with the sops CLI pinned in hack/tools, and SecretData
// hands kustomize-controller its private key. The private key lives only in
// memory and in the Secret the test makes of it; nothing here prints it.
type SOPSKey struct {
	identity *age.X25519Identity
}

// NewSOPSKey makes a fresh age key pair.
func NewSOPSKey(t TB) *SOPSKey {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatalf("generating an age key: %v", err)
	}
	return &SOPSKey{identity: id}
}

// SecretData is the data of a Secret kustomize-controller decrypts with:
// an age private key under a key ending in .agekey.
func (k *SOPSKey) SecretData() map[string][]byte {
	return map[string][]byte{"identity.agekey": []byte(k.identity.String())}
}

// Encrypt encrypts the data and stringData of a YAML manifest, as a user
// encrypting a Secret for git would, and returns the encrypted manifest.
func (k *SOPSKey) Encrypt(t TB, manifest string) string {
	t.Helper()
	sops, err := tool("sops")
	if err != nil {
		t.Fatal(err)
	}
	// A directory of its own, so no .sops.yaml around the checkout applies.
	dir := t.TempDir()
	file := filepath.Join(dir, "secret.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runIn(dir, sops, "--encrypt", "--age", k.identity.Recipient().String(),
		"--encrypted-regex", "^(data|stringData)$", file)
	if err != nil {
		t.Fatalf("encrypting with sops: %v", err)
	}
	return out
}
