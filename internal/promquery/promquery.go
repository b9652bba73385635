// Package promquery asks a Prometheus-compatible server (Prometheus,
// Thanos, Mimir, VictoriaMetrics: anything serving its HTTP API's
// /api/v1/query) whether a query holds, for the checks of rollout stages.
package promquery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Timeout bounds one query, the server's evaluation included.
const Timeout = 10 * time.Second

// maxAnswer bounds the answer read: a query matching many series is
// refused rather than read whole.
const maxAnswer = 1 << 20

// maxMessage bounds what a server's error message contributes to a
// status message.
const maxMessage = 256

// Client asks the server at URL (its base: the query API is
// URL/api/v1/query) over HTTP.
type Client struct {
	URL  string
	HTTP *http.Client
}

// Holds evaluates query as an instant query and reports whether it holds:
// it returned at least one sample, or a scalar that is not 0, as an
// alerting rule fires. The description says what the answer was. An error
// means no answer: the server could not be reached, refused the query or
// answered what is not its API.
func (c *Client) Holds(ctx context.Context, query string) (holds bool, description string, err error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	form := url.Values{"query": {query}, "timeout": {Timeout.String()}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+"/api/v1/query", strings.NewReader(form.Encode()))
	if err != nil {
		return false, "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return false, "", err
	}
	if len(raw) > maxAnswer {
		return false, "", fmt.Errorf("the answer is over %d bytes: make the query return fewer series", maxAnswer)
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil || a.Status == "" {
		return false, "", fmt.Errorf("HTTP %d: not an answer of the Prometheus query API", resp.StatusCode)
	}
	if a.Status != "success" {
		return false, "", fmt.Errorf("the server refused the query (%s): %s", a.ErrorType, clip(a.Error))
	}
	return a.Data.holds()
}

// answer is the part of an instant query's answer the check reads.
type answer struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      result `json:"data"`
}

// result is an answer's data.
type result struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

// holds reads a result: a vector or matrix holds when it has a series, a
// scalar when it is not 0.
func (d *result) holds() (bool, string, error) {
	switch d.ResultType {
	case "vector", "matrix":
		var series []json.RawMessage
		if err := json.Unmarshal(d.Result, &series); err != nil {
			return false, "", fmt.Errorf("reading the %s: %w", d.ResultType, err)
		}
		if len(series) == 0 {
			return false, "the query returned no sample", nil
		}
		return true, fmt.Sprintf("the query returned %d series", len(series)), nil
	case "scalar":
		var pair [2]json.RawMessage
		var text string
		if err := json.Unmarshal(d.Result, &pair); err != nil || json.Unmarshal(pair[1], &text) != nil {
			return false, "", errors.New("reading the scalar: not [time, \"value\"]")
		}
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return false, "", fmt.Errorf("reading the scalar: %w", err)
		}
		return v != 0, "the query returned the scalar " + text, nil
	}
	return false, "", fmt.Errorf("the query returned a %q; a check needs a vector or a scalar", clip(d.ResultType))
}

// clip shortens a server's text for a status message.
func clip(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage] + "..."
	}
	return s
}

// Names is a regular expression, quoted for a PromQL string, that matches
// exactly the names given: what $(REMOTES) in a stage's check stands for.
// It matches nothing, not even the empty value, when names is empty.
func Names(names []string) string {
	if len(names) == 0 {
		return "a^"
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strings.ReplaceAll(regexp.QuoteMeta(n), `\`, `\\`)
	}
	return strings.Join(quoted, "|")
}
