package testenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onsi/gomega"
)

// Process is a program the test started; it is stopped with SIGTERM when the
// test ends, and its log is printed if the test failed.
type Process struct {
	// Name identifies the process in messages.
	Name string
	// LogPath is the file holding the process's standard output and error.
	LogPath string

	cmd  *exec.Cmd
	done chan error
}

// StartProcess runs path with args and extra environment variables, logging to
// a file in the test's temporary directory.
func StartProcess(t TB, name, path string, env []string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, name, cmd)
}

// startCmd is StartProcess for a command the caller prepared.
func startCmd(t TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	p, err := startLogged(name, logPath, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Logf("%s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("last lines of %s log (%s):\n%s", name, logPath, Tail(logPath, 40))
		}
	})
	return p
}

// startLogged starts cmd with its output going to a new file at logPath; the
// caller stops it.
func startLogged(name, logPath string, cmd *exec.Cmd) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Process{Name: name, LogPath: logPath}
	if err := p.run(cmd, logFile); err != nil {
		return nil, err
	}
	return p, nil
}

// run starts cmd as the process, its output going to logFile, which is
// closed once it exits.
func (p *Process) run(cmd *exec.Cmd, logFile *os.File) error {
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- cmd.Wait()
		logFile.Close()
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// Restart starts a process that has exited (stopped, killed or crashed)
// again, with the same command, its output appended to the same log, as a
// kubelet restarts a container. It is not safe beside Stop or Kill.
func (p *Process) Restart() error {
	if exited, _ := p.Exited(); !exited {
		return fmt.Errorf("%s is still running", p.Name)
	}
	cmd := exec.Command(p.cmd.Path, p.cmd.Args[1:]...)
	cmd.Env, cmd.Dir, cmd.SysProcAttr = p.cmd.Env, p.cmd.Dir, p.cmd.SysProcAttr
	logFile, err := os.OpenFile(p.LogPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "--- restarted at %s ---\n", time.Now().UTC().Format(time.RFC3339))
	return p.run(cmd, logFile)
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. It returns the process's exit error, if any; stopping a process
// that already exited returns nil.
func (p *Process) Stop(grace time.Duration) error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for Exited
		return err
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		p.done <- <-p.done
		return fmt.Errorf("did not exit within %s of SIGTERM; killed", grace)
	}
}

// Kill ends the process with SIGKILL, as a node failure or the kernel's
// OOM killer would, giving it no chance to step down or clean up, and
// returns once it is gone.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	err := <-p.done
	p.done <- err
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited, and with which error.
func (p *Process) Exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// healthClient checks the health endpoints of processes the tests started.
// Kubernetes components serve them over HTTPS with a certificate they sign
// themselves, so it does not verify certificates: it only asks whether the
// process answers.
var healthClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
}}

// WaitHTTP waits until url (http or https) answers 200, failing the test if
// the process exits first or ctx ends.
func (p *Process) WaitHTTP(ctx context.Context, url string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := healthClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited before %s answered: %v\n%s", p.Name, url, err, Tail(p.LogPath, 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %s: %w\n%s", p.Name, url, ctx.Err(), Tail(p.LogPath, 20))
		case <-tick.C:
		}
	}
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t TB) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

// handedOut holds the addresses FreeAddr returned, and the webhook ports of
// clusters, in this test process: a port free now may be one handed out
// but not listened on yet.
var handedOut sync.Map

// Tail returns the last n lines of the file at path, for failure messages.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// Commands BuildCommand built, by name and version, in commandsDir: the
// tests of a package that runs under Run or RunWithClusters share them.
var (
	commandsMu  sync.Mutex
	commandsDir string
	commands    = map[string]string{}
)

// TestVersion is the version the tests stamp the commands they build with,
// unless a test is about the version: one build serves every package.
const TestVersion = "v0.0.0-test"

// BuildCommand compiles ./cmd/<name> of this repository, stamped with
// version, and returns the binary's path. Every package of a make test run
// shares one build per name and version (see sharedBuild), and so do the
// tests of a package that runs under Run or RunWithClusters, as linking
// takes seconds; otherwise each test builds into its temporary directory.
func BuildCommand(t TB, name, version string) string {
	t.Helper()
	commandsMu.Lock()
	defer commandsMu.Unlock()
	key := filepath.Join(version, name)
	if out, ok := commands[key]; ok {
		return out
	}
	build := func(out string) error {
		_, err := runIn(RepoRoot, "go", "build", "-o", out,
			"-ldflags", "-X github.com/fleeet-dev/fleeet/internal/version.Version="+version, "./cmd/"+name)
		return err
	}
	out, shared, err := sharedBuild(filepath.Join("commands", key), build)
	if !shared {
		dir := commandsDir
		if dir == "" {
			dir = t.TempDir()
		}
		out = filepath.Join(dir, key)
		err = build(out)
	}
	if err != nil {
		t.Fatalf("building %s: %v", name, err)
	}
	if shared || commandsDir != "" {
		commands[key] = out
	}
	return out
}

// sharedBuild returns the path of the build named key that every test
// package of one make test run shares, running build into a temporary path
// and renaming it there if no package has built it yet. hack/go-test.sh
// names a directory of the run in $FLEEET_TEST_BUILDS, as the source does
// not change during a run; without it, shared is false and nothing is
// built. A lock file per key keeps two packages from building one thing at
// once.
func sharedBuild(key string, build func(out string) error) (out string, shared bool, err error) {
	dir := os.Getenv("FLEEET_TEST_BUILDS")
	if dir == "" {
		return "", false, nil
	}
	out = filepath.Join(dir, key)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", true, err
	}
	lock, err := os.OpenFile(out+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", true, err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", true, err
	}
	if _, err := os.Stat(out); err == nil {
		return out, true, nil
	}
	tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
	if err := build(tmp); err != nil {
		return "", true, err
	}
	return out, true, os.Rename(tmp, out)
}

// Run runs the tests of a package, sharing the commands BuildCommand
// builds among them, and removes those after; use it from TestMain as
// os.Exit(testenv.Run(m)).
func Run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fleeet-commands-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	commandsMu.Lock()
	commandsDir = dir
	commandsMu.Unlock()
	return m.Run()
}

// Get requests url with the given headers, as name, value pairs, and
// returns the response's status and body.
func Get(g gomega.Gomega, url string, header ...string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	return resp.StatusCode, string(body)
}
