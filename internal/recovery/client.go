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
	"net"
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

// resendFor is how long Recover keeps sending its request again while it
// cannot tell whether the endpoint acted on it: well within the endpoint's
// answerGrace, so that a request whose answer was lost after it rotated
// the key is answered once more (see Server).
const resendFor = time.Minute

// unanswered is a request the endpoint may have acted on without the
// answer saying so: none came, it came unreadable, or it says the endpoint
// failed midway.
type unanswered struct{ error }

func (e unanswered) Unwrap() error { return e.error }

// Recover asks the endpoint at url, whose serving certificate caBundle
// signs, to rotate Remote ns/remote's key from current to next, and returns
// the first credential it issues. Once it returns a token, next is the
// Remote's key and current is worthless. While it cannot tell whether the
// endpoint rotated the key, it sends the same request again, for up to
// resendFor.
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
	defer c.CloseIdleConnections()
	first := time.Now()
	for delay := time.Second; ; delay *= 4 {
		token, err := send(ctx, c, strings.TrimSuffix(url, "/")+Path, body)
		if _, unsure := errors.AsType[unanswered](err); !unsure || time.Since(first)+delay > resendFor {
			return token, err
		}
		select {
		case <-ctx.Done():
			return credential.Token{}, err
		case <-time.After(delay):
		}
	}
}

// send POSTs body to url once and reads the credential answered.
func send(ctx context.Context, c *http.Client, url string, body []byte) (credential.Token, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return credential.Token{}, fmt.Errorf("spec.management.recoveryURL: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		// A request that could not be dialled never left: nothing to resend.
		if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
			return credential.Token{}, fmt.Errorf("asking the recovery endpoint: %w", err)
		}
		return credential.Token{}, unanswered{fmt.Errorf("asking the recovery endpoint: %w", err)}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusForbidden:
		return credential.Token{}, ErrRefused
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		err := fmt.Errorf("the recovery endpoint answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
		if resp.StatusCode >= http.StatusInternalServerError {
			return credential.Token{}, unanswered{err}
		}
		return credential.Token{}, err
	}
	var out Response
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&out); err != nil || out.Token == "" {
		return credential.Token{}, unanswered{fmt.Errorf("the recovery endpoint's answer holds no credential: %v", err)}
	}
	return credential.Token{Value: out.Token, ExpiresAt: out.ExpiresAt}, nil
}
