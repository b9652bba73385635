// Command nodeprobe is the workload of internal/testenv's node tests: it
// shows that a Pod on a testenv node reaches the apiserver, and that the
// apiserver reaches the Pod.
//
//	nodeprobe serve    serves /healthz and /hello over HTTP on :8080 and,
//	                   with the certificate in /tls, HTTPS on :8443: /hello
//	                   answers with the Pod's name ($POD_NAME) and /validate
//	                   is a validating admission webhook that denies every
//	                   request, naming the Pod.
//	nodeprobe get URL  gets URL over HTTP, writes the body to its
//	                   termination message and exits 0, or 1 if it could not.
//	nodeprobe whoami   asks the apiserver who it is, exactly as in-cluster
//	                   clients reach it ($KUBERNETES_SERVICE_HOST and _PORT,
//	                   the ServiceAccount's token and CA), writes the user
//	                   name to its termination message and exits 0, or 1 if
//	                   it could not.
//
// It uses only the standard library, so its image stays small.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: nodeprobe serve|whoami|get URL")
	}
	var result string
	var err error
	switch os.Args[1] {
	case "serve":
		serve()
	case "whoami":
		result, err = whoami()
	case "get":
		if len(os.Args) != 3 {
			log.Fatal("usage: nodeprobe get URL")
		}
		result, err = get(os.Args[2])
	default:
		log.Fatalf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result)
	if err := os.WriteFile("/dev/termination-log", []byte(result), 0o644); err != nil {
		log.Fatal(err)
	}
}

// get returns the body of a 200 answer to GET url.
func get(url string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}

func serve() {
	pod := os.Getenv("POD_NAME")
	hello := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "hello from %s", pod) }
	go func() {
		plain := http.NewServeMux()
		plain.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
		plain.HandleFunc("/hello", hello)
		log.Fatal(http.ListenAndServe(":8080", plain))
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", hello)
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		var review struct {
			Request struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		log.Printf("denying admission request %s", review.Request.UID)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "admission.k8s.io/v1",
			"kind":       "AdmissionReview",
			"response": map[string]any{
				"uid":     review.Request.UID,
				"allowed": false,
				"status":  map[string]any{"code": http.StatusForbidden, "message": "denied by " + pod},
			},
		})
	})
	log.Fatal(http.ListenAndServeTLS(":8443", "/tls/tls.crt", "/tls/tls.key", mux))
}

// whoami posts a SelfSubjectReview with the Pod's ServiceAccount token.
func whoami() (string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return "", fmt.Errorf("KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
	}
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		return "", err
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return "", err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return "", fmt.Errorf("%s/ca.crt holds no certificate", serviceAccountDir)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	url := "https://" + net.JoinHostPort(host, port) + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &review); err != nil {
		return "", err
	}
	return review.Status.UserInfo.Username, nil
}
