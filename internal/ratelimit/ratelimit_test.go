package ratelimit

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestEachKeyHasItsOwnBucketAndTheLeastRecentlySeenGoesFirst(t *testing.T) {
	g := NewWithT(t)
	p := NewPerKey(1, 2, 2)
	now := time.Now()
	g.Expect(p.For("a").AllowN(now, 2)).To(BeTrue())
	g.Expect(p.For("a").AllowN(now, 1)).To(BeFalse(), "a spent its burst")
	g.Expect(p.For("b").AllowN(now, 1)).To(BeTrue(), "b's bucket is its own")
	p.For("a")
	p.For("c")
	g.Expect(p.Len()).To(Equal(2))
	g.Expect(p.Holds("b")).To(BeFalse(), "b was seen least recently")
	g.Expect(p.Holds("a")).To(BeTrue())
	g.Expect(p.For("a").AllowN(now, 1)).To(BeFalse(), "a kept its spent bucket")
}
