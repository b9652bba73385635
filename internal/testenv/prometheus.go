package testenv

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
)

// Prometheus is a server speaking the instant-query part of Prometheus'
// HTTP API (POST or GET /api/v1/query), for the checks of rollout stages:
// each query it is told about returns one sample while it holds and none
// while it does not; any other query is refused as Prometheus refuses one
// it cannot parse. It is ours, not Prometheus: a check reads only whether
// an answer has samples, which this answers exactly as Prometheus does.
type Prometheus struct {
	URL string

	srv   *httptest.Server
	mu    sync.Mutex
	holds map[string]bool
	asked map[string]int
}

// NewPrometheus starts a Prometheus; Close stops it.
func NewPrometheus() *Prometheus {
	p := &Prometheus{holds: map[string]bool{}, asked: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p
}

// Close stops the server.
func (p *Prometheus) Close() { p.srv.Close() }

// Set makes query hold, or not.
func (p *Prometheus) Set(query string, holds bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holds[query] = holds
}

// Asked returns how often query was asked.
func (p *Prometheus) Asked(query string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked[query]
}

func (p *Prometheus) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/api/v1/query" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	query := r.FormValue("query")
	p.mu.Lock()
	holds, known := p.holds[query]
	p.asked[query]++
	p.mu.Unlock()
	if !known {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "bad_data", "error": "unknown query " + query})
		return
	}
	result := []any{}
	if holds {
		result = append(result, map[string]any{"metric": map[string]string{"__name__": "up"}, "value": []any{1764504000.0, "1"}})
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
}
