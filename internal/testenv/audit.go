package testenv

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditEvent is one request as the apiserver's audit log records it.
type AuditEvent struct {
	ID   string
	Verb string
	// Resource is "group/resource/subresource" without empty parts
	// ("secrets", "fleeet.dev/remotes/status"); empty for a request to a
	// non-resource URL such as /api.
	Resource string
	// Namespace and Name are the object's, when the request names one.
	Namespace, Name string
	// ImpersonatedUser is whom the user acted as, if anyone.
	ImpersonatedUser string
	RequestURI       string
	// Code is the response's status code.
	Code     int
	Received metav1.MicroTime
}

// AuditLog reads the log WithAuditLog had the apiserver write and returns
// user's requests, each once (a long request is logged when its response
// starts and again when it completes).
func AuditLog(t TB, path, user string) []AuditEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	seen := map[string]bool{}
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			AuditID          string                     `json:"auditID"`
			User             struct{ Username string }  `json:"user"`
			ImpersonatedUser *struct{ Username string } `json:"impersonatedUser"`
			Verb             string                     `json:"verb"`
			ObjectRef        *struct {
				APIGroup, Resource, Subresource, Namespace, Name string
			} `json:"objectRef"`
			RequestURI     string              `json:"requestURI"`
			ResponseStatus *struct{ Code int } `json:"responseStatus"`
			Received       metav1.MicroTime    `json:"requestReceivedTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("reading the audit log %s: %v", path, err)
		}
		if ev.User.Username != user || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		e := AuditEvent{ID: ev.AuditID, Verb: ev.Verb, RequestURI: ev.RequestURI, Received: ev.Received}
		if r := ev.ObjectRef; r != nil {
			e.Resource = strings.Trim(strings.ReplaceAll(r.APIGroup+"/"+r.Resource+"/"+r.Subresource, "//", "/"), "/")
			e.Namespace, e.Name = r.Namespace, r.Name
		}
		if ev.ImpersonatedUser != nil {
			e.ImpersonatedUser = ev.ImpersonatedUser.Username
		}
		if ev.ResponseStatus != nil {
			e.Code = ev.ResponseStatus.Code
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the audit log %s: %v", path, err)
	}
	return out
}
