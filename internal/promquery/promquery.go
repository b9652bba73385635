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
	"sync"
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

// Answer is what a server said to a query, or why it said nothing (Err).
type Answer struct {
	// At is when it came, to the second.
	At          time.Time
	Holds       bool
	Description string
	Err         error
}

// maxAnswers bounds the answers an Asker keeps; past it, the oldest go.
const maxAnswers = 10000

// Asker asks queries in the background, at most Workers at once, and
// keeps the last answer to each: a controller that needs one asks for it
// and is told (Answered) once it is in, instead of waiting on a slow or
// unreachable server while other tenants' work waits behind it. Start
// asks what Ask queues, before or after it starts.
type Asker struct {
	Client *Client
	// Workers is how many queries are asked at once; at least one.
	Workers int
	// Answered is called, from a worker, with the key of each answer that
	// comes in.
	Answered func(key string)

	mu      sync.Mutex
	answers map[string]Answer
	asking  map[string]bool
	queue   chan question // made by init
}

type question struct{ key, query string }

// Ask returns the last answer to query asked under key, when it came after
// after; otherwise it has the query asked, unless it is already, and
// reports false. A full queue asks later: the caller asks again.
func (a *Asker) Ask(key, query string, after time.Time) (Answer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.init()
	key += "\x00" + query // another query is another question
	if ans, ok := a.answers[key]; ok && ans.At.After(after) {
		return ans, true
	}
	if a.asking[key] {
		return Answer{}, false
	}
	select {
	case a.queue <- question{key, query}:
		a.asking[key] = true
	default: // full: asked for again later
	}
	return Answer{}, false
}

// Start asks the queued queries until ctx ends (a controller-runtime
// Runnable).
func (a *Asker) Start(ctx context.Context) error {
	a.mu.Lock()
	a.init()
	queue := a.queue
	a.mu.Unlock()
	var wg sync.WaitGroup
	for range max(1, a.Workers) {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case q := <-queue:
					a.answer(ctx, q)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// init makes the Asker's maps and queue once; a.mu is held.
func (a *Asker) init() {
	if a.queue == nil {
		a.answers, a.asking, a.queue = map[string]Answer{}, map[string]bool{}, make(chan question, 1024)
	}
}

// answer asks q and keeps its answer.
func (a *Asker) answer(ctx context.Context, q question) {
	holds, description, err := a.Client.Holds(ctx, q.query)
	a.mu.Lock()
	if len(a.answers) >= maxAnswers {
		oldest := ""
		for k, ans := range a.answers {
			if oldest == "" || ans.At.Before(a.answers[oldest].At) {
				oldest = k
			}
		}
		delete(a.answers, oldest)
	}
	// To the second, as a status keeps it: an answer is not taken for a
	// newer one once read back from the status it was written into.
	a.answers[q.key] = Answer{At: time.Now().Truncate(time.Second), Holds: holds, Description: description, Err: err}
	delete(a.asking, q.key)
	a.mu.Unlock()
	if a.Answered != nil {
		key, _, _ := strings.Cut(q.key, "\x00")
		a.Answered(key)
	}
}
