package offline

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Credentials are the user names and passwords for private sources, read
// from a file in git's credential-store format: one
// scheme://user:password@host[:port] a line (https, http or oci), blank
// lines and lines starting with # skipped. A credential is handed only to
// the host and scheme it names, so a Module naming another host cannot
// collect it; nothing of the file is ever printed, not even in an error.
type Credentials struct {
	// File is the path given, for git's store helper to read itself.
	File  string
	hosts map[string]*url.Userinfo
}

// ReadCredentials reads a credentials file; an empty path reads none.
func ReadCredentials(path string) (*Credentials, error) {
	c := &Credentials{File: path, hosts: map[string]*url.Userinfo{}}
	if path == "" {
		return c, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--credentials-file: %w", err)
	}
	lines := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; lines.Scan(); n++ {
		line := strings.TrimSpace(lines.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// The parse error would quote the line, password and all.
		u, err := url.Parse(line)
		if err != nil || u.Host == "" || u.User == nil || u.User.Username() == "" {
			return nil, fmt.Errorf("--credentials-file %s line %d: want scheme://user:password@host", path, n)
		}
		if _, ok := u.User.Password(); !ok {
			return nil, fmt.Errorf("--credentials-file %s line %d: no password after the user name", path, n)
		}
		switch u.Scheme {
		case "https", "http", "oci":
		default:
			return nil, fmt.Errorf("--credentials-file %s line %d: scheme %q: want https, http or oci (ssh uses ssh's own keys)", path, n, u.Scheme)
		}
		c.hosts[u.Scheme+"://"+u.Host] = u.User
	}
	return c, lines.Err()
}

// For returns the user name and password for a source URL's scheme and
// host, or empty strings.
func (c *Credentials) For(source string) (user, password string) {
	u, err := url.Parse(source)
	if err != nil || c == nil {
		return "", ""
	}
	info := c.hosts[u.Scheme+"://"+u.Host]
	if info == nil {
		return "", ""
	}
	password, _ = info.Password()
	return info.Username(), password
}
