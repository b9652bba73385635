package testenv

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// gitHTTPBackend is where Debian's git package installs the smart-HTTP server.
const gitHTTPBackend = "/usr/lib/git-core/git-http-backend"

// GitServer serves the bare repositories under a directory over smart HTTP
// through git http-backend, as a real git host would.
type GitServer struct {
	// URL is the server's base URL; repository "app" is at URL + "/app.git".
	URL  string
	root string
	// creds are what a private server accepts now; nil for a public one.
	creds *atomic.Pointer[GitCredentials]
}

// Rotate makes a private server accept creds, and nothing it accepted
// before, as a git host does once a password or token is changed.
func (s *GitServer) Rotate(creds GitCredentials) {
	s.creds.Store(&creds)
}

// NewGitServer starts a git server on loopback, stopped when the test ends.
func NewGitServer(t TB) *GitServer {
	t.Helper()
	return startGitServer(t, "127.0.0.1", nil)
}

// GitCredentials are what a private GitServer accepts: HTTP basic auth with
// Username and Password, or Token as a bearer token.
type GitCredentials struct {
	Username, Password, Token string
}

// accept reports whether a request carries these credentials.
func (c GitCredentials) accept(r *http.Request) bool {
	if user, pass, ok := r.BasicAuth(); ok {
		return equal(user, c.Username) && equal(pass, c.Password)
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && c.Token != "" && equal(bearer, c.Token)
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// NewPrivateGitServer starts a git server on loopback that answers only
// requests carrying creds, as a private git host over HTTP does, stopped
// when the test ends.
func NewPrivateGitServer(t TB, creds GitCredentials) *GitServer {
	t.Helper()
	return startGitServer(t, "127.0.0.1", &creds)
}

// NewPodReachableGitServer starts a git server that Pods on testenv nodes
// reach (Flux running as Pods), at the host address they route to, stopped
// when the test ends.
func NewPodReachableGitServer(t TB) *GitServer {
	t.Helper()
	host, err := podReachableHostIP()
	if err != nil {
		t.Fatal(err)
	}
	return startGitServer(t, host, nil)
}

// startGitServer serves a new directory of repositories on host, to
// requests carrying creds when they are not nil.
func startGitServer(t TB, host string, creds *GitCredentials) *GitServer {
	t.Helper()
	root := t.TempDir()
	var handler http.Handler = &cgi.Handler{
		Path: gitHTTPBackend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	accepted := &atomic.Pointer[GitCredentials]{}
	if creds != nil {
		accepted.Store(creds)
		backend := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !accepted.Load().accept(r) {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			backend.ServeHTTP(w, r)
		})
	}
	srv := serve(t, host, handler)
	return &GitServer{URL: srv.URL, root: root, creds: accepted}
}

// serve serves handler over plain HTTP on a free port of host until the
// test ends.
func serve(t TB, host string, handler http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(handler)
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listening on %s: %v", host, err)
	}
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// Commit writes files (path → content) into repository repo on branch main as
// one commit, creating the repository on first use, and tags the commit when
// tag is not empty. Files from earlier commits stay unless overwritten. It
// returns the repository's URL and the commit's full SHA.
func (s *GitServer) Commit(t TB, repo string, files map[string]string, tag string) (url, commit string) {
	t.Helper()
	bare := filepath.Join(s.root, repo+".git")
	work := filepath.Join(s.root, ".work", repo)
	if _, err := os.Stat(bare); os.IsNotExist(err) {
		git(t, s.root, "init", "--quiet", "--bare", "--initial-branch=main", bare)
		git(t, s.root, "init", "--quiet", "--initial-branch=main", work)
		git(t, work, "remote", "add", "origin", bare)
	}
	WriteFiles(t, work, files)
	git(t, work, "add", "--all")
	git(t, work, "commit", "--quiet", "--allow-empty", "-m", "test commit")
	if tag != "" {
		git(t, work, "tag", tag)
	}
	git(t, work, "push", "--quiet", "--tags", "origin", "main")
	commit = strings.TrimSpace(git(t, work, "rev-parse", "HEAD"))
	return s.URL + "/" + repo + ".git", commit
}

// WriteFiles writes files (path → content) under dir, making the
// directories they need.
func WriteFiles(t TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func git(t TB, dir string, args ...string) string {
	t.Helper()
	args = append([]string{
		"-c", "user.name=fleeet test", "-c", "user.email=test@fleeet.dev",
		"-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false",
	}, args...)
	out, err := runIn(dir, "git", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
