package testenv

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"

	"net"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHGitServer serves a GitServer's repositories over SSH, read-only, to one
// client key, as a private git host does.
type SSHGitServer struct {
	// URL is the server's base URL; repository "app" is at URL + "/app.git".
	URL string
	// KnownHosts is the known_hosts line pinning the server's host key.
	KnownHosts string
	// Identity is the PEM (OpenSSH) private key of the one client the
	// server lets in.
	Identity []byte
}

// NewSSHHostKey returns a fresh ed25519 host key's known_hosts line for
// addr (host:port): what a client pins for a server holding another key.
func NewSSHHostKey(t TB, addr string) string {
	t.Helper()
	signer, _ := newSSHKey(t)
	return knownhosts.Line([]string{knownhosts.Normalize(addr)}, signer.PublicKey())
}

// newSSHKey generates an ed25519 key, as a signer and as PEM.
func newSSHKey(t TB) (ssh.Signer, []byte) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	return signer, pem.EncodeToMemory(block)
}

// ServeSSH serves the server's repositories over SSH on loopback too, with a
// generated host key, until the test ends. Only git-upload-pack (fetch) is
// served.
func (s *GitServer) ServeSSH(t TB) *SSHGitServer {
	t.Helper()
	hostKey, _ := newSSHKey(t)
	client, identity := newSSHKey(t)
	allowed := string(client.PublicKey().Marshal())
	config := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if string(key.Marshal()) != allowed {
				return nil, errors.New("unknown key")
			}
			return nil, nil
		},
	}
	config.AddHostKey(hostKey)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Connections still open when the test ends die with the process.
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go s.serveSSH(conn, config)
		}
	}()
	addr := l.Addr().String()
	return &SSHGitServer{
		URL:        "ssh://git@" + addr,
		KnownHosts: knownhosts.Line([]string{knownhosts.Normalize(addr)}, hostKey.PublicKey()),
		Identity:   identity,
	}
}

// serveSSH runs one SSH connection: each session may exec git-upload-pack
// on one repository.
func (s *GitServer) serveSSH(conn net.Conn, config *ssh.ServerConfig) {
	defer conn.Close()
	_, chans, reqs, err := ssh.NewServerConn(conn, config)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			return
		}
		go s.session(ch, requests)
	}
}

// session answers a session's requests until it execs git-upload-pack,
// then runs it and reports its exit status.
func (s *GitServer) session(ch ssh.Channel, requests <-chan *ssh.Request) {
	defer ch.Close()
	for req := range requests {
		if req.Type != "exec" {
			// env and the like: git sends GIT_PROTOCOL, nothing needed.
			_ = req.Reply(req.Type == "env", nil)
			continue
		}
		var payload struct{ Command string }
		repo, err := "", ssh.Unmarshal(req.Payload, &payload)
		if err == nil {
			repo, err = s.uploadPackRepo(payload.Command)
		}
		if err != nil {
			_ = req.Reply(false, nil)
			fmt.Fprintln(ch.Stderr(), err)
			return
		}
		_ = req.Reply(true, nil)
		cmd := exec.Command("git-upload-pack", "--strict", repo)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
		status := uint32(0)
		if err := cmd.Run(); err != nil {
			status = 1
		}
		_ = ch.CloseWrite()
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}

// uploadPackRepo is the repository directory a `git-upload-pack '/app.git'`
// command names, refusing any other command and any path outside the root.
func (s *GitServer) uploadPackRepo(command string) (string, error) {
	arg, ok := strings.CutPrefix(command, "git-upload-pack ")
	if !ok {
		return "", fmt.Errorf("only git-upload-pack is served, not %q", command)
	}
	name := strings.Trim(arg, "'\"")
	dir := filepath.Join(s.root, filepath.Clean("/"+name))
	if rel, err := filepath.Rel(s.root, dir); err != nil || strings.HasPrefix(rel, "..") || strings.HasPrefix(rel, ".work") {
		return "", fmt.Errorf("no repository %q", name)
	}
	return dir, nil
}
