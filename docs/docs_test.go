// Package docs_test keeps the book's examples true: every Kubernetes object
// in a YAML example of README.md and docs/*.md is sent to a real apiserver,
// with fleeet's CRDs and the fleet-manager's admission webhooks, as a
// server-side dry run, and every fleetctl command line is parsed by the
// real fleetctl command tree. An example the API or the command line no
// longer takes fails here, naming the file and line.
//
// The line before a fence may direct the test: <!-- doctest: skip (why) -->
// leaves out an example that is deliberately partial, and <!-- doctest: as
// fleet-manager --> applies the objects of one that shows what the manager
// itself writes as the manager's identity rather than a tenant's user.
package docs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/manager"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// The directives the line before a fence may hold.
const (
	directivePrefix = "<!-- doctest:"
	skip            = "skip"
	asManager       = "as fleet-manager"
)

// block is one fenced code block of a Markdown file.
type block struct {
	// file is the Markdown file, relative to the repository root.
	file string
	// line is the line of the opening fence, counted from 1.
	line int
	// lang is the fence's info string, such as yaml or sh.
	lang string
	// directive is the doctest directive before the fence, if any.
	directive string
	// lines are the block's lines, without the fence's indentation.
	lines []string
}

// blocks returns the fenced blocks of README.md and docs/*.md, leaving out
// those marked skip, and fails t on a directive it does not know.
func blocks(t *testing.T) []block {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	for _, path := range append([]string{filepath.Join(testenv.RepoRoot, "README.md")}, files...) {
		rel, err := filepath.Rel(testenv.RepoRoot, path)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range fenced(filepath.ToSlash(rel), string(doc)) {
			switch {
			case b.directive == skip || strings.HasPrefix(b.directive, skip+" "):
			case b.directive == "" || b.directive == asManager:
				out = append(out, b)
			default:
				t.Errorf("%s:%d: unknown directive %q: want %q or %q", b.file, b.line, b.directive, skip+" (why)", asManager)
			}
		}
	}
	return out
}

// fenced splits a Markdown document into its fenced code blocks.
func fenced(file, doc string) []block {
	var out []block
	var open *block
	var fence, indent, previous string
	for i, line := range strings.Split(doc, "\n") {
		n := i + 1
		trimmed := strings.TrimLeft(line, " ")
		if open != nil {
			if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
				out = append(out, *open)
				open, previous = nil, ""
				continue
			}
			open.lines = append(open.lines, strings.TrimPrefix(line, indent))
			continue
		}
		if f := fenceOf(trimmed); f != "" {
			fence, indent = f, line[:len(line)-len(trimmed)]
			open = &block{file: file, line: n, lang: strings.TrimSpace(trimmed[len(f):])}
			if d, ok := strings.CutPrefix(strings.TrimSpace(previous), directivePrefix); ok {
				open.directive = strings.TrimSpace(strings.TrimSuffix(d, "-->"))
			}
			continue
		}
		if strings.TrimSpace(line) != "" {
			previous = line
		}
	}
	return out
}

// fenceOf returns the fence a line opens (three or more backticks or
// tildes), or "".
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		run := line[:len(line)-len(strings.TrimLeft(line, c))]
		if len(run) >= 3 {
			return run
		}
	}
	return ""
}

// example is one Kubernetes object of a YAML block.
type example struct {
	// at is file:line of the object's first line.
	at  string
	obj *unstructured.Unstructured
	// asManager says the docs show the object as the manager writes it.
	asManager bool
}

// objects returns every Kubernetes object of the YAML blocks: the
// documents, separated by ---, that have an apiVersion and a kind. Other
// YAML (Helm values, a status excerpt, a CI workflow) is left out.
func objects(t *testing.T, bs []block) []example {
	t.Helper()
	var out []example
	for _, b := range bs {
		if b.lang != "yaml" && b.lang != "yml" {
			continue
		}
		start, doc := b.line+1, []string{}
		flush := func() {
			text := strings.Join(doc, "\n")
			at := fmt.Sprintf("%s:%d", b.file, start)
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(text), &head); err != nil || head.APIVersion == "" || head.Kind == "" {
				return
			}
			obj := &unstructured.Unstructured{}
			if err := yaml.UnmarshalStrict([]byte(text), &obj.Object); err != nil {
				t.Errorf("%s: %s %s is not valid YAML: %v", at, head.APIVersion, head.Kind, err)
				return
			}
			out = append(out, example{at: at, obj: obj, asManager: b.directive == asManager})
		}
		for i, line := range b.lines {
			if strings.TrimRight(line, " ") == "---" {
				flush()
				start, doc = b.line+2+i, nil
				continue
			}
			doc = append(doc, line)
		}
		flush()
	}
	return out
}

// namespaces are the tenant namespaces of the management cluster the
// examples use, with their annotations, set up as the docs tell readers to:
// team-a by the README's install and, for the agent's BootstrapModule,
// "Enrolling from an inventory" in operating.md; platform by "Upgrading
// fleet-agent and Flux" there.
var namespaces = map[string]map[string]string{
	"team-a":   {"fleeet.dev/target-namespaces": "team-a,fleeet-system"},
	"platform": {"fleeet.dev/target-namespaces": "fleeet-system"},
}

// managerNamespace is the fleet-manager's own, where it would read user
// policies; there are none.
const managerNamespace = "fleeet-system"

func TestEveryYAMLExampleIsAdmitted(t *testing.T) {
	examples := objects(t, blocks(t))
	// The book holds Modules, Remotes and more: finding none means the
	// extraction broke, not that all is well.
	NewWithT(t).Expect(len(examples)).To(BeNumerically(">=", 5), "Kubernetes objects found in the docs")

	c := testenv.StartCluster(t, "management", testenv.WithWebhooks())
	ctx := t.Context()
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
		t.Fatal(err)
	}
	// The fleet-manager's admission, as the binary serves it, without the
	// controllers: nothing a dry run writes is there for them to act on.
	testenv.RunManager(t, c, "fleet-manager", func(ctx context.Context, mgr ctrl.Manager) error {
		return manager.Setup(ctx, mgr, manager.Options{AdmissionOnly: true, Namespace: managerNamespace})
	})
	for name, annotations := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations,
			Labels: map[string]string{fleeetv1.TenantLabel: "true"}}}
		if err := c.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	reader := tenantUser(t, c, "docs-reader")

	for _, ex := range examples {
		ns := ex.obj.GetNamespace()
		if _, ok := namespaces[ns]; ns != "" && !ok {
			t.Errorf("%s: %s %s is in namespace %s, which the test does not create: add it to namespaces as the docs set it up",
				ex.at, ex.obj.GetKind(), ex.obj.GetName(), ns)
			continue
		}
		// The manager's identity is the cluster admin the in-process
		// manager runs as.
		var writer client.Client = reader
		if ex.asManager {
			writer = c.Client
		}
		// Strict: a field the schema does not know is refused, not dropped.
		err := writer.Create(ctx, ex.obj, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
		if err != nil {
			t.Errorf("%s: %s %s/%s was refused: %v", ex.at, ex.obj.GetKind(), ns, ex.obj.GetName(), err)
		}
	}
	for _, w := range reader.warnings() {
		t.Logf("warning: %s", w)
	}
}

// user is a client acting as a tenant's user, with the warnings it was
// given.
type user struct {
	client.Client
	mu   sync.Mutex
	msgs []string
}

func (u *user) HandleWarningHeader(_ int, _ string, msg string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.msgs = append(u.msgs, msg)
}

func (u *user) warnings() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.msgs...)
}

// tenantUser returns a client acting as name, who may do anything with
// fleeet objects in the examples' namespaces: what stops an example is then
// the schema or the admission policies, as for a reader applying it.
func tenantUser(t *testing.T, c *testenv.Cluster, name string) *user {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleeet-everything"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{fleeetv1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}}}}
	if err := c.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	for ns := range namespaces {
		if err := c.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	u := &user{}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{"system:authenticated"}}
	cfg.WarningHandler = u
	var err error
	if u.Client, err = client.New(cfg, client.Options{Scheme: c.Client.Scheme()}); err != nil {
		t.Fatal(err)
	}
	return u
}

// command is one fleetctl command line of a block.
type command struct {
	// at is file:line of the line the command starts on.
	at   string
	args []string
}

// fleetctlCommands returns every fleetctl command line of the blocks: a
// line that starts with fleetctl, after its indentation and an optional
// "$ " prompt, continued over lines ending in a backslash, up to a comment,
// pipe, redirection or list operator. Besides shell blocks this finds the
// prompted commands of output examples and the commands of CI scripts in
// YAML.
func fleetctlCommands(t *testing.T, bs []block) []command {
	t.Helper()
	var out []command
	for _, b := range bs {
		for i := 0; i < len(b.lines); i++ {
			line := strings.TrimPrefix(strings.TrimLeft(b.lines[i], " \t"), "$ ")
			if line != "fleetctl" && !strings.HasPrefix(line, "fleetctl ") {
				continue
			}
			at := fmt.Sprintf("%s:%d", b.file, b.line+1+i)
			words, more := shellWords(line)
			for more && i+1 < len(b.lines) {
				i++
				var next []string
				next, more = shellWords(b.lines[i])
				words = append(words, next...)
			}
			out = append(out, command{at: at, args: words[1:]})
		}
	}
	return out
}

// shellWords splits one line of a shell command into words as sh would,
// without expansions: quotes and backslashes, a # that starts a word begins
// a comment, and the first |, ;, &, < or > ends the command. more says the
// line ends in a backslash and continues on the next.
func shellWords(line string) (words []string, more bool) {
	var word strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, word.String())
		}
		word.Reset()
		inWord = false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && i == len(line)-1:
			end()
			return words, true
		case c == '\\':
			i++
			word.WriteByte(line[i])
			inWord = true
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				j = len(line) - i - 1
			}
			word.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				word.WriteByte(line[i])
			}
			inWord = true
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			// A command substitution stays in the word unexpanded.
			depth := 0
			for ; i < len(line); i++ {
				word.WriteByte(line[i])
				if line[i] == '(' {
					depth++
				} else if line[i] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			inWord = true
		case c == ' ' || c == '\t':
			end()
		case c == '#' && !inWord:
			end()
			return words, false
		case strings.IndexByte("|;&<>", c) >= 0:
			// A redirection's file descriptor (2>) is not an argument.
			if inWord && strings.Trim(word.String(), "0123456789") == "" {
				word.Reset()
				inWord = false
			}
			end()
			return words, false
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	end()
	return words, false
}

// parse finds the fleetctl command args name and parses its flags and
// arguments as running it would, without running it.
func parse(args []string) error {
	root := fleetctl.NewCommand()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if !cmd.Runnable() {
		return fmt.Errorf("%q is not a command: %s needs one of its subcommands", strings.Join(args, " "), cmd.CommandPath())
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return nil
}

func TestEveryFleetctlExampleParses(t *testing.T) {
	commands := fleetctlCommands(t, blocks(t))
	NewWithT(t).Expect(len(commands)).To(BeNumerically(">=", 5), "fleetctl commands found in the docs")
	for _, c := range commands {
		if err := parse(c.args); err != nil {
			t.Errorf("%s: fleetctl %s: %v", c.at, strings.Join(c.args, " "), err)
		}
	}
}

func TestShellWordsSplitsAsShDoes(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string
		more bool
	}{
		{`fleetctl diff -f ingress.yaml   # create or update`, []string{"fleetctl", "diff", "-f", "ingress.yaml"}, false},
		{`fleetctl rollout pause ingress --reason "change freeze"  # nothing new`, []string{"fleetctl", "rollout", "pause", "ingress", "--reason", "change freeze"}, false},
		{`fleetctl -n team-a diff --credentials-file "$RUNNER_TEMP/credentials" \`, []string{"fleetctl", "-n", "team-a", "diff", "--credentials-file", "$RUNNER_TEMP/credentials"}, true},
		{`  --base base/fleet -f head/fleet > fleet.diff || test $? -eq 1`, []string{"--base", "base/fleet", "-f", "head/fleet"}, false},
		{`fleetctl backup -A -o /backup/fleet-$(date +%F-%H%M).yaml 2>/dev/null`, []string{"fleetctl", "backup", "-A", "-o", "/backup/fleet-$(date +%F-%H%M).yaml"}, false},
		{`fleetctl status -l 'env=prod,tier in (a,b)'`, []string{"fleetctl", "status", "-l", "env=prod,tier in (a,b)"}, false},
		{`fleetctl why app#1 --remote edge-1`, []string{"fleetctl", "why", "app#1", "--remote", "edge-1"}, false},
	} {
		words, more := shellWords(c.line)
		g := NewWithT(t)
		g.Expect(words).To(Equal(c.want), c.line)
		g.Expect(more).To(Equal(c.more), c.line)
	}
}

func TestParseRefusesWhatFleetctlRefuses(t *testing.T) {
	g := NewWithT(t)
	g.Expect(parse([]string{"-n", "team-a", "rollout", "pause", "ingress", "--reason", "freeze"})).To(Succeed())
	for _, args := range [][]string{
		{"rollout", "pause", "ingress", "--no-such-flag"},
		{"no-such-command"},
		{"rollout", "no-such-subcommand", "ingress"},
		{"rollout"},
	} {
		g.Expect(parse(args)).To(HaveOccurred(), strings.Join(args, " "))
	}
}

func TestFencedFindsBlocksAndDirectives(t *testing.T) {
	doc := strings.Join([]string{
		"# Title",
		"```yaml",
		"a: 1",
		"```",
		"- a list item:",
		"",
		"  <!-- doctest: skip (partial) -->",
		"",
		"  ````sh",
		"  fleetctl status",
		"  ```",
		"  ````",
		"<!-- doctest: as fleet-manager -->",
		"~~~",
		"b: 2",
		"~~~",
	}, "\n")
	NewWithT(t).Expect(fenced("x.md", doc)).To(Equal([]block{
		{file: "x.md", line: 2, lang: "yaml", lines: []string{"a: 1"}},
		{file: "x.md", line: 9, lang: "sh", directive: "skip (partial)", lines: []string{"fleetctl status", "```"}},
		{file: "x.md", line: 14, directive: asManager, lines: []string{"b: 2"}},
	}))
}
