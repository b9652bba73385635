package webhooks

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxReviewBytes bounds an AdmissionReview's body, as controller-runtime
// does: an object and its old version, each at most what the apiserver
// stores, and the request around them.
const maxReviewBytes = 7 << 20

// Guard bounds what one request to the webhook costs before anything
// decodes it: the body is read up to maxReviewBytes and scanned once, a
// byte at a time, for nesting, and a review whose object (or old object)
// nests deeper than maxDepth is denied there, naming the path, without
// being decoded, queued for a slot or shown to a policy. Decoding a review
// costs time that grows with its depth, so checking depth after decoding
// let one tenant's deep objects slow every tenant's admissions.
func Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
		if err != nil {
			http.Error(w, "reading the request body failed", http.StatusBadRequest)
			return
		}
		if len(body) > maxReviewBytes {
			http.Error(w, "request entity is too large; limit is "+strconv.Itoa(maxReviewBytes)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		if path, uid, ok := reviewTooDeep(body); ok {
			deny(w, uid, depthRefusal(path, maxDepth))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// reviewTooDeep scans an AdmissionReview: when request.object or
// request.oldObject nests deeper than maxDepth, or anything else in the
// review does, it returns the path (within the object for the object's
// fields) and, when seen before it, the request's uid (the apiserver
// writes it first). Malformed JSON is
// left to the decoder, which refuses it.
func reviewTooDeep(body []byte) (path, uid string, tooDeep bool) {
	const root = 2 // request.object
	found, err := preferWritten(func(managed int) ([]level, error) {
		s := &scanner{cap: managedFieldsDepth + root + 1, value: func(p []level, raw []byte) {
			// The apiserver writes uids as plain strings; anything needing
			// unescaping is not one.
			if len(p) == 2 && string(p[0].key) == "request" && string(p[1].key) == "uid" && uid == "" && bytes.IndexByte(raw, '\\') < 0 {
				uid = string(raw)
			}
		}}
		return s.scan(body, func(p []level) (int, int) {
			if len(p) >= root && string(p[0].key) == "request" && !p[1].array &&
				(string(p[1].key) == "object" || string(p[1].key) == "oldObject") {
				return objectLimit(p, root, maxDepth, managed), root
			}
			// The review around the objects is a few levels deep.
			return maxDepth, 0
		})
	}, root)
	if err != nil || found == nil {
		return "", "", false
	}
	if len(found) >= root && string(found[0].key) == "request" && (string(found[1].key) == "object" || string(found[1].key) == "oldObject") {
		path = render(found[root:])
	} else {
		path = render(found)
	}
	return path, uid, true
}

// deny answers a review with a refusal.
func deny(w http.ResponseWriter, uid, msg string) {
	out, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: types.UID(uid), Allowed: false,
			Result: &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: msg}},
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func itoa(i int) string { return strconv.Itoa(i) }
