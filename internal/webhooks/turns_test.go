package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
)

// namespaceReview is a small review of a Module in namespace ns.
func namespaceReview(ns string) []byte {
	return bytes.ReplaceAll(deepReview(1), []byte(`"team-a"`), []byte(strconv.Quote(ns)))
}

// One namespace's reviews are passed on at most NamespaceConcurrency at a
// time: while team-a's review holds its namespace's turn, team-b's is
// passed on at once, and team-a's next waits, then is refused with a 429
// saying to retry.
func TestAFloodingNamespaceQueuesBehindItself(t *testing.T) {
	g := NewWithT(t)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	entered := make(chan string, 10)
	var held atomic.Bool
	p := &Policies{NamespaceConcurrency: 1, NamespaceWait: 100 * time.Millisecond}
	h := p.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ns := "team-b"
		if bytes.Contains(body, []byte(`"namespace":"team-a"`)) {
			ns = "team-a"
		}
		entered <- ns
		if ns == "team-a" {
			// Only the first holds its turn, so a second passed on
			// fails the test instead of hanging it.
			if held.CompareAndSwap(false, true) {
				<-hold
			}
		}
	}))
	serve := func(ns string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(namespaceReview(ns))))
		return rec
	}

	go serve("team-a")
	g.Eventually(entered).Should(Receive(Equal("team-a")))

	serve("team-b")
	g.Expect(entered).To(Receive(Equal("team-b")), "another namespace's review waited for team-a's")

	rec := serve("team-a")
	g.Expect(entered).NotTo(Receive(), "team-a's second review was passed on while its first held the turn")
	out := &admissionv1.AdmissionReview{}
	g.Expect(json.Unmarshal(rec.Body.Bytes(), out)).To(Succeed())
	g.Expect(out.Response.Allowed).To(BeFalse())
	g.Expect(out.Response.Result.Code).To(BeEquivalentTo(http.StatusTooManyRequests))
	g.Expect(out.Response.Result.Details.RetryAfterSeconds).To(BeEquivalentTo(1))
	g.Expect(out.Response.Result.Message).To(HavePrefix("this namespace's admission reviews are judged at most 1 at a time, and this one found no turn within 100ms; retry it"))
}

// A review that finds its namespace's turns taken waits for one, and is
// passed on when one is given back.
func TestAReviewWaitsForItsNamespacesTurn(t *testing.T) {
	g := NewWithT(t)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	entered := make(chan struct{}, 10)
	p := &Policies{NamespaceConcurrency: 1, NamespaceWait: time.Minute}
	h := p.Guard(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		entered <- struct{}{}
		<-hold
	}))
	for range 2 {
		go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(namespaceReview("team-a"))))
	}
	g.Eventually(entered).Should(Receive())
	g.Consistently(entered, 200*time.Millisecond).ShouldNot(Receive(), "the second review did not wait for the first")
	hold <- struct{}{}
	g.Eventually(entered).Should(Receive())
}

// Turns are kept only for namespaces with a review in flight or waiting:
// reviews forged with a new namespace each leave nothing behind.
func TestTurnsOfForgedNamespacesDoNotPileUp(t *testing.T) {
	g := NewWithT(t)
	tr := &turns{n: 1, queues: map[string]*queue{}}
	held, ok := tr.take(context.Background(), "held", time.Millisecond)
	g.Expect(ok).To(BeTrue())
	for i := range 1000 {
		release, ok := tr.take(context.Background(), "forged-"+strconv.Itoa(i), time.Millisecond)
		g.Expect(ok).To(BeTrue())
		release()
	}
	_, ok = tr.take(context.Background(), "held", time.Millisecond)
	g.Expect(ok).To(BeFalse(), "a second turn of a namespace with one turn")
	g.Expect(tr.queues).To(HaveLen(1))
	held()
	g.Expect(tr.queues).To(BeEmpty())
}
