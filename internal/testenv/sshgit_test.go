package testenv_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// The SSH git server lets in only its client key, checked against the host
// key its known_hosts line pins, and serves fetches of its repositories and
// nothing else.
func TestSSHGitServerServesFetchesToItsKeyOnly(t *testing.T) {
	g := NewWithT(t)
	git := testenv.NewGitServer(t)
	git.Commit(t, "app", map[string]string{"README": "hello\n"}, "v1.0.0")
	srv := git.ServeSSH(t)
	addr := strings.TrimPrefix(srv.URL, "ssh://git@")

	hostKeys := knownHosts(t, srv.KnownHosts)
	dial := func(identity []byte, hostKeys ssh.HostKeyCallback) (*ssh.Client, error) {
		signer, err := ssh.ParsePrivateKey(identity)
		g.Expect(err).NotTo(HaveOccurred())
		return ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "git", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hostKeys})
	}

	client, err := dial(srv.Identity, hostKeys)
	g.Expect(err).NotTo(HaveOccurred())
	defer client.Close()
	run := func(cmd string) (string, error) {
		s, err := client.NewSession()
		g.Expect(err).NotTo(HaveOccurred())
		defer s.Close()
		s.Stdin = strings.NewReader("0000")
		out, err := s.CombinedOutput(cmd)
		return string(out), err
	}
	out, err := run("git-upload-pack '/app.git'")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("refs/tags/v1.0.0"), "the advertisement lists the tag")
	for _, cmd := range []string{"git-receive-pack '/app.git'", "sh -c id", "git-upload-pack '/.work/app'"} {
		out, err := run(cmd)
		g.Expect(err).To(HaveOccurred(), "%s answered %q", cmd, out)
	}

	otherGit := testenv.NewGitServer(t)
	otherGit.Commit(t, "x", map[string]string{"a": "b"}, "")
	stranger := otherGit.ServeSSH(t).Identity
	_, err = dial(stranger, hostKeys)
	g.Expect(err).To(MatchError(ContainSubstring("unable to authenticate")), "another client key is refused")

	_, err = dial(srv.Identity, knownHosts(t, testenv.NewSSHHostKey(t, addr)))
	g.Expect(err).To(MatchError(ContainSubstring("key mismatch")), "a known_hosts pinning another key refuses the server")
}

// knownHosts checks host keys against one known_hosts line.
func knownHosts(t *testing.T, line string) ssh.HostKeyCallback {
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(path)
	if err != nil {
		t.Fatal(err)
	}
	return cb
}
