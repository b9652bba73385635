package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestPinImageChangesOnlyTheImageLines: a released chart's values.yaml is the
// repository's, comments and all, but for image.repository and image.digest.
func TestPinImageChangesOnlyTheImageLines(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			values, err := os.ReadFile(filepath.Join("..", "..", "charts", name, "values.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			pinned, err := pinImage(values, "registry.example.com/fleeet/"+name, digest)
			g.Expect(err).NotTo(HaveOccurred())

			before, after := strings.Split(string(values), "\n"), strings.Split(string(pinned), "\n")
			g.Expect(after).To(HaveLen(len(before)))
			var changed []string
			for i := range before {
				if before[i] != after[i] {
					changed = append(changed, after[i])
				}
			}
			g.Expect(changed).To(Equal([]string{
				`  repository: "registry.example.com/fleeet/` + name + `"`,
				`  digest: "` + digest + `"`,
			}))
		})
	}
}

// TestPinImageRefusesValuesWithoutTheImageLines: a values.yaml whose image
// block is written otherwise is refused, not released with the image unpinned.
func TestPinImageRefusesValuesWithoutTheImageLines(t *testing.T) {
	for name, values := range map[string]string{
		"no image block": "logLevel: info\n",
		"no digest line": "image:\n  repository: ghcr.io/fleeet-dev/fleet-agent\n  tag: \"\"\n",
		"a flow mapping": "image: {repository: ghcr.io/fleeet-dev/fleet-agent, digest: \"\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := pinImage([]byte(values), "registry.example.com/fleeet/fleet-agent", "sha256:00")
			g.Expect(err).To(MatchError(ContainSubstring("is not a line of its own under image:")))
		})
	}
}

// TestPinImageLeavesOtherBlocksAlone: keys of the same names under another
// top-level key keep their values.
func TestPinImageLeavesOtherBlocksAlone(t *testing.T) {
	g := NewWithT(t)
	values := "image:\n  repository: a\n  digest: \"\"\n# -- Another block.\nother:\n  digest: \"\"\n  repository: b\n"
	pinned, err := pinImage([]byte(values), "registry.example.com/fleeet/fleet-agent", "sha256:00")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(pinned)).To(Equal("image:\n  repository: \"registry.example.com/fleeet/fleet-agent\"\n  digest: \"sha256:00\"\n" +
		"# -- Another block.\nother:\n  digest: \"\"\n  repository: b\n"))
}
