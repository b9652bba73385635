package delivery

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// What a Writer remembers of Secrets written more than RewriteAfter ago,
// which it no longer trusts, goes: one Assemblage deleted long ago does
// not stay in memory for good.
func TestAWriterForgetsWhatItNoLongerTrusts(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	w := &Writer{Now: func() time.Time { return now }}
	item := Item{Data: map[string][]byte{"password": []byte("s3cr3t")}}
	gone, kept := writtenKey{assemblage: "gone", name: "db"}, writtenKey{assemblage: "kept", name: "db"}
	w.remember(gone, types.UID("1"), item)
	now = now.Add(RewriteAfter / 2)
	w.remember(kept, types.UID("2"), item)
	if len(w.written) != 2 {
		t.Fatalf("remembers %d Secrets, want 2", len(w.written))
	}
	now = now.Add(RewriteAfter/2 + time.Second)
	w.remember(kept, types.UID("2"), item)
	if _, ok := w.written[gone]; ok || len(w.written) != 1 {
		t.Errorf("remembers %v; want only the Secret written again", w.written)
	}
	if !w.fresh(kept, types.UID("2"), item) {
		t.Error("the Secret written again is not trusted")
	}
}
