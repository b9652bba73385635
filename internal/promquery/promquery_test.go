package promquery_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleeet-dev/fleeet/internal/promquery"
)

// answering is a server answering every query with body and status code.
func answering(t *testing.T, code int, body string) (*promquery.Client, *[]string) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/query" {
			t.Errorf("asked %s %s", r.Method, r.URL.Path)
		}
		asked = append(asked, r.FormValue("query"))
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return &promquery.Client{URL: srv.URL + "/", HTTP: srv.Client()}, &asked
}

func TestHoldsReadsTheAnswerAsAnAlertingRuleDoes(t *testing.T) {
	cases := []struct {
		name, body  string
		holds       bool
		description string
	}{
		{"a series", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0"]}]}}`, true, "the query returned 1 series"},
		{"no series", `{"status":"success","data":{"resultType":"vector","result":[]}}`, false, "the query returned no sample"},
		{"a range", `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]},{"metric":{},"values":[]}]}}`, true, "the query returned 2 series"},
		{"a scalar 1", `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`, true, "the query returned the scalar 1"},
		{"a scalar 0", `{"status":"success","data":{"resultType":"scalar","result":[1,"0"]}}`, false, "the query returned the scalar 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, asked := answering(t, http.StatusOK, tc.body)
			holds, description, err := c.Holds(t.Context(), `up{job="web"} == 1`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(holds).To(Equal(tc.holds))
			g.Expect(description).To(Equal(tc.description))
			g.Expect(*asked).To(Equal([]string{`up{job="web"} == 1`}))
		})
	}
}

func TestHoldsSaysWhyThereIsNoAnswer(t *testing.T) {
	cases := []struct {
		name, body string
		code       int
		err        string
	}{
		{"a refused query", `{"status":"error","errorType":"bad_data","error":"1:4: parse error: unexpected \"}\""}`, http.StatusBadRequest,
			`the server refused the query (bad_data): 1:4: parse error: unexpected "}"`},
		{"not the API", `<html>login</html>`, http.StatusFound, "HTTP 302: not an answer of the Prometheus query API"},
		{"a string", `{"status":"success","data":{"resultType":"string","result":[1,"x"]}}`, http.StatusOK, `the query returned a "string"; a check needs a vector or a scalar`},
		{"a long error", `{"status":"error","errorType":"execution","error":"` + strings.Repeat("x", 1000) + `"}`, http.StatusUnprocessableEntity,
			"the server refused the query (execution): " + strings.Repeat("x", 256) + "..."},
		{"too many series", `{"status":"success","data":{"resultType":"vector","result":[` + strings.Repeat(`{"metric":{},"value":[1,"1"]},`, 40000) + `{}]}}`, http.StatusOK,
			"the answer is over 1048576 bytes: make the query return fewer series"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, _ := answering(t, tc.code, tc.body)
			holds, _, err := c.Holds(t.Context(), "up")
			g.Expect(holds).To(BeFalse())
			g.Expect(err).To(MatchError(tc.err))
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		g := NewWithT(t)
		c := &promquery.Client{URL: "http://127.0.0.1:1", HTTP: http.DefaultClient}
		holds, _, err := c.Holds(t.Context(), "up")
		g.Expect(holds).To(BeFalse())
		g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
	})
}

func TestNamesMatchExactlyTheNamesGiven(t *testing.T) {
	g := NewWithT(t)
	// What the PromQL string literal holds once its escapes are read.
	unquote := func(s string) string { return strings.ReplaceAll(s, `\\`, `\`) }
	re := regexp.MustCompile("^(?:" + unquote(promquery.Names([]string{"edge-1", "eu.prod"})) + ")$")
	for name, matches := range map[string]bool{"edge-1": true, "eu.prod": true, "euxprod": false, "edge-10": false, "": false} {
		g.Expect(re.MatchString(name)).To(Equal(matches), name)
	}
	none := regexp.MustCompile("^(?:" + promquery.Names(nil) + ")$")
	g.Expect(none.MatchString("")).To(BeFalse(), "a series without the label is not matched")
	g.Expect(none.MatchString("a")).To(BeFalse())
}

// An Asker never makes its caller wait on the server: Ask returns at once,
// the query is asked once however often it is asked for meanwhile, and the
// answer is told by its key and kept until a newer one is wanted.
func TestAnAskerAsksInTheBackground(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	var mu sync.Mutex
	asked := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked++
		mu.Unlock()
		<-release
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]}]}}`))
	}))
	t.Cleanup(srv.Close)
	answered := make(chan string, 10)
	a := &promquery.Asker{Client: &promquery.Client{URL: srv.URL, HTTP: srv.Client()}, Workers: 1,
		Answered: func(key string) { answered <- key }}
	go func() { _ = a.Start(t.Context()) }()

	start := time.Now()
	for range 6 {
		_, ok := a.Ask("team-a/app/canary", "up == 1", time.Time{})
		g.Expect(ok).To(BeFalse())
	}
	g.Expect(time.Since(start)).To(BeNumerically("<", time.Second), "the server hangs; Ask does not")
	close(release)
	g.Eventually(answered, 5*time.Second).Should(Receive(Equal("team-a/app/canary")))
	ans, ok := a.Ask("team-a/app/canary", "up == 1", time.Time{})
	g.Expect(ok).To(BeTrue())
	g.Expect(ans.Holds).To(BeTrue())
	g.Expect(ans.At).To(Equal(ans.At.Truncate(time.Second)), "to the second, as a status keeps it")
	mu.Lock()
	g.Expect(asked).To(Equal(1), "asked once for six calls")
	mu.Unlock()

	_, ok = a.Ask("team-a/app/canary", "up == 1", ans.At)
	g.Expect(ok).To(BeFalse(), "an answer no newer than the one had is asked again")
	g.Eventually(answered, 5*time.Second).Should(Receive())
	_, ok = a.Ask("team-a/app/canary", "up == 2", time.Time{})
	g.Expect(ok).To(BeFalse(), "another query is another question")
}
