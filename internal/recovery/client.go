package recovery

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fleeet-dev/fleeet/internal/credential"
)

// ErrRefused is the endpoint's refusal of the key: the Remote is unknown
// (not restored yet on a rebuilt management cluster), its key is another
// (someone else holding this key recovered first) or it was last seen
// longer ago than the grace. Retrying may help only in the first case.
var ErrRefused = errors.New("the recovery endpoint refused this cluster's recovery key")

// Recover asks the endpoint at url, whose serving certificate caBundle
// signs, to rotate Remote ns/remote's key from current to next, and returns
// the first credential it issues. Once it returns a token, next is the
// Remote's key and current is worthless.
func Recover(ctx context.Context, url string, caBundle []byte, ns, remote string, current, next ed25519.PrivateKey) (credential.Token, error) {
	body, err := json.Marshal(NewRequest(ns, remote, current, next, time.Now()))
	if err != nil {
		return credential.Token{}, err
	}
	pool := x509.NewCertPool()
	if len(caBundle) > 0 && !pool.AppendCertsFromPEM(caBundle) {
		return credential.Token{}, errors.New("spec.management.recoveryCABundle: no PEM certificate in it")
	}
	if len(caBundle) == 0 {
		if pool, err = x509.SystemCertPool(); err != nil {
			return credential.Token{}, err
		}
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(url, "/")+Path, bytes.NewReader(body))
	if err != nil {
		return credential.Token{}, fmt.Errorf("spec.management.recoveryURL: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return credential.Token{}, fmt.Errorf("asking the recovery endpoint: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusForbidden:
		return credential.Token{}, ErrRefused
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return credential.Token{}, fmt.Errorf("the recovery endpoint answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	var out Response
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&out); err != nil || out.Token == "" {
		return credential.Token{}, fmt.Errorf("the recovery endpoint's answer holds no credential: %v", err)
	}
	return credential.Token{Value: out.Token, ExpiresAt: out.ExpiresAt}, nil
}
