package webhooks

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxReviewBytes bounds an AdmissionReview's body, as controller-runtime
// does: an object and its old version, each at most what the apiserver
// stores, and the request around them.
const maxReviewBytes = 7 << 20

// DefaultNamespaceWait is how long a review waits for a turn of its
// namespace when Policies leaves NamespaceWait zero: well within what the
// apiserver waits for the webhook (5 s in the chart) and what the manager
// gives one review (3 s), so that the writer reads the refusal, not a
// timeout.
const DefaultNamespaceWait = time.Second

// defaultNamespaceConcurrency is how many of one namespace's reviews are
// judged at once when Policies leaves NamespaceConcurrency zero: half the
// cores the manager runs on (GOMAXPROCS), so one namespace never holds them
// all, and at most two, since a review at the node limit takes up to about
// 80 MiB of heap while it is judged, so one namespace never holds much of
// the manager's memory either (512 MiB in the chart).
func defaultNamespaceConcurrency() int { return max(1, min(2, runtime.GOMAXPROCS(0)/2)) }

// Guard bounds what one request to the webhook costs, and what one
// namespace's requests take from the others, before anything decodes them.
//
// The body is read up to maxReviewBytes and scanned once, a byte at a time:
// a review whose object (or old object) nests deeper than maxDepth, or
// holds more JSON nodes than its kind may (nodeLimit), is denied there,
// naming the path, without being decoded, queued for a slot or shown to a
// policy. Decoding and judging a review costs time and memory that grow
// with its depth and its nodes, so checking them after decoding let one
// tenant's objects slow every tenant's admissions.
//
// A review within the limits then waits for a turn of its namespace: at
// most NamespaceConcurrency of one namespace's reviews are passed on at
// once, so a tenant sending many costly reviews queues behind itself while
// other tenants' reviews find a core. One that gets no turn within
// NamespaceWait is denied (429, retry after a second). The namespace is the
// one the review names: the apiserver's for a write through it; a review
// forged by a client on the network may name any, and changes nothing.
func (p *Policies) Guard(next http.Handler) http.Handler {
	t := &turns{n: p.NamespaceConcurrency, queues: map[string]*queue{}}
	if t.n <= 0 {
		t.n = defaultNamespaceConcurrency()
	}
	wait := cmp.Or(p.NamespaceWait, DefaultNamespaceWait)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		// Sized from Content-Length, the body is read into one buffer,
		// not into a buffer doubled again and again: reviews refused here
		// should cost little memory too.
		buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 0), maxReviewBytes+1)+bytes.MinRead))
		_, err := buf.ReadFrom(io.LimitReader(r.Body, maxReviewBytes+1))
		body := buf.Bytes()
		if err != nil {
			http.Error(w, "reading the request body failed", http.StatusBadRequest)
			return
		}
		if len(body) > maxReviewBytes {
			http.Error(w, "request entity is too large; limit is "+strconv.Itoa(maxReviewBytes)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		s := p.scanReview(body)
		if s.breach != nil {
			deny(w, s.uid, &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: s.breach.refusal()})
			return
		}
		release, ok := t.take(r.Context(), s.namespace, wait)
		if !ok {
			deny(w, s.uid, &metav1.Status{Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
				Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
				Message: fmt.Sprintf("this namespace's admission reviews are judged at most %d at a time, and this one found no turn within %s; retry it (namespaces take turns so that one tenant's writes cannot slow another's admissions)", t.n, wait)})
			return
		}
		defer release()
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// reviewScan is what one pass over an AdmissionReview tells Guard: the
// request's uid and namespace as the apiserver writes them (plain strings,
// ahead of the objects), and the first limit the review breaks, if any.
type reviewScan struct {
	uid, namespace string
	breach         *breach
}

// scanReview scans an AdmissionReview: request.object and request.oldObject
// are held to maxDepth and to the node limit of the request's kind, as far
// as the review has named it before them (the apiserver names it first),
// their managedFields to limits of their own; anything else in the review
// to maxDepth and the object node limit. Paths within an object are named
// from its root. Malformed JSON is left to the decoder, which refuses it.
func (p *Policies) scanReview(body []byte) reviewScan {
	const root = 2 // request.object
	var (
		out      reviewScan
		kind     string
		obj, old *object
	)
	// objectAt is the object a path from the review's root leads into, or
	// nil. (Conversions of the keys to strings stay in comparisons, which
	// allocate nothing: this runs for every container of the review.)
	objectAt := func(path []level) **object {
		switch {
		case len(path) < root || string(path[0].key) != "request" || path[1].array:
			return nil
		case string(path[1].key) == "object":
			return &obj
		case string(path[1].key) == "oldObject":
			return &old
		}
		return nil
	}
	found, err := preferWritten(func(limitManaged bool) (*finding, error) {
		out, kind, obj, old = reviewScan{}, "", nil, nil
		rest := &budget{limit: p.maxObjectNodes()}
		s := &scanner{cap: managedFieldsDepth + root + 1, value: func(path []level, raw []byte) {
			// The apiserver writes these as plain strings; anything
			// needing unescaping is not one.
			if len(path) < 2 || len(path) > 3 || string(path[0].key) != "request" || bytes.IndexByte(raw, '\\') >= 0 {
				return
			}
			switch {
			case len(path) == 2 && string(path[1].key) == "uid" && out.uid == "":
				out.uid = string(raw)
			case len(path) == 2 && string(path[1].key) == "namespace" && out.namespace == "":
				out.namespace = string(raw)
			case len(path) == 3 && string(path[1].key) == "kind" && string(path[2].key) == "kind" && kind == "":
				kind = string(raw)
			}
		}}
		return s.scan(body, func(path []level) rule {
			if o := objectAt(path); o != nil {
				if len(path) == root {
					*o = newObject(root, limits{depth: maxDepth, nodes: p.nodeLimit(kind)}, limitManaged, o == &old)
				}
				return (*o).rule(path)
			}
			// The review around the objects is a few levels deep and
			// holds a few dozen nodes.
			return rule{limit: maxDepth, budget: rest}
		})
	}, root)
	if err != nil || found == nil {
		return out
	}
	if o := objectAt(found.path); o != nil && *o != nil {
		out.breach = (*o).breach(found)
	} else {
		out.breach = &breach{path: render(found.path), depth: maxDepth}
		if found.budget != nil {
			out.breach.nodes, out.breach.review = found.budget.limit, true
		}
	}
	return out
}

// deny answers a review with a refusal.
func deny(w http.ResponseWriter, uid string, status *metav1.Status) {
	status.Status = metav1.StatusFailure
	out, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: types.UID(uid), Allowed: false, Result: status},
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func itoa(i int) string { return strconv.Itoa(i) }
