package offline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/fluxcd/pkg/sourceignore"
	"github.com/fluxcd/pkg/tar"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/registry"
	helmrepo "helm.sh/helm/v3/pkg/repo"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gitURL, helmURL and ociURL are the schemes a source may name, as the
// CRDs' validation has them: files are not admitted by an apiserver, and
// git would run a command for an ext:: URL.
var (
	gitURL  = regexp.MustCompile(`^(https?|ssh)://\S+$`)
	helmURL = regexp.MustCompile(`^(https?|oci)://\S+$`)
	ociURL  = regexp.MustCompile(`^oci://\S+$`)
)

// Sources fetches the sources syncs name, each once per Sources, into a
// work directory: git repositories with the git CLI at the exact tag or
// commit, OCI artifacts at their tag or digest, charts through the Helm SDK
// from https and oci repositories.
type Sources struct {
	dir       string
	creds     *Credentials
	plainHTTP bool
	checkouts map[string]string // URL@revision → git directory
	artifacts map[string]string // reference → the layer's file
	charts    map[string]*chart.Chart
}

// NewSources fetches into dir with creds; plainHTTP talks to oci registries
// over plain HTTP, as helm --plain-http does.
func NewSources(dir string, creds *Credentials, plainHTTP bool) *Sources {
	return &Sources{dir: dir, creds: creds, plainHTTP: plainHTTP, checkouts: map[string]string{}, artifacts: map[string]string{}, charts: map[string]*chart.Chart{}}
}

// FetchTo writes a source's files into dir as source-controller's artifact
// holds them: a GitRepository's (CheckoutTo) or an OCIRepository's
// (ArtifactTo).
func (s *Sources) FetchTo(ctx context.Context, src client.Object, dir string) error {
	switch src := src.(type) {
	case *sourcev1.GitRepository:
		return s.CheckoutTo(ctx, src, dir)
	case *sourcev1.OCIRepository:
		return s.ArtifactTo(ctx, src, dir)
	}
	return fmt.Errorf("a %T cannot be fetched offline", src)
}

// ArtifactTo writes an OCIRepository's artifact at its digest or tag into
// dir as source-controller extracts it: the layer of the media type its
// layerSelector names, else the first, symbolic links skipped, what it
// ignores left out; within the untar size limit of Flux's tar package, as
// the artifact is the pull request's to choose. Each artifact is pulled
// once per Sources.
func (s *Sources) ArtifactTo(ctx context.Context, repo *sourcev1.OCIRepository, dir string) error {
	layer, err := s.pullLayer(ctx, repo)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", repo.Spec.URL, err)
	}
	blob, err := os.Open(layer)
	if err != nil {
		return err
	}
	defer blob.Close()
	if err := tar.Untar(blob, dir, tar.WithSkipSymlinks()); err != nil {
		return fmt.Errorf("artifact %s: %w", repo.Spec.URL, err)
	}
	return ignore(dir, repo.Spec.Ignore)
}

// pullLayer pulls the layer of an OCIRepository's artifact that
// source-controller would pick into a file of the work directory.
func (s *Sources) pullLayer(ctx context.Context, repo *sourcev1.OCIRepository) (string, error) {
	spec := repo.Spec
	if !ociURL.MatchString(spec.URL) {
		return "", fmt.Errorf("source.oci.url %q: want oci://", spec.URL)
	}
	ref := strings.TrimPrefix(spec.URL, "oci://")
	switch r := spec.Reference; {
	case r != nil && r.Digest != "":
		ref += "@" + r.Digest
	case r != nil && r.Tag != "":
		ref += ":" + r.Tag
	default:
		return "", errors.New("no tag or digest: a moving reference is not rendered")
	}
	if file, ok := s.artifacts[ref]; ok {
		return file, nil
	}
	var nameOpts []name.Option
	if s.plainHTTP {
		nameOpts = append(nameOpts, name.Insecure)
	}
	parsed, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return "", err
	}
	opts := []remote.Option{remote.WithContext(ctx)}
	if user, password := s.creds.For(spec.URL); user != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: user, Password: password}))
	}
	img, err := remote.Image(parsed, opts...)
	if err != nil {
		return "", err
	}
	layers, err := img.Layers()
	if err != nil {
		return "", err
	}
	i := 0
	if want := repo.GetLayerMediaType(); want != "" {
		i = slices.IndexFunc(layers, func(l v1.Layer) bool {
			mt, err := l.MediaType()
			return err == nil && string(mt) == want
		})
	}
	if i < 0 || len(layers) == 0 {
		return "", fmt.Errorf("no layer of media type %q", repo.GetLayerMediaType())
	}
	blob, err := layers[i].Compressed()
	if err != nil {
		return "", err
	}
	defer blob.Close()
	file, err := os.CreateTemp(s.dir, "layer-")
	if err != nil {
		return "", err
	}
	defer file.Close()
	if _, err := io.Copy(file, blob); err != nil {
		return "", err
	}
	s.artifacts[ref] = file.Name()
	return file.Name(), nil
}

// CheckoutTo writes a GitRepository's files at its tag or commit into dir
// as source-controller's artifact holds them: symbolic links included, what
// it ignores left out. The repository is fetched once per Sources.
func (s *Sources) CheckoutTo(ctx context.Context, repo *sourcev1.GitRepository, dir string) error {
	gitDir, rev, err := s.fetch(ctx, repo)
	if err != nil {
		return err
	}
	if err := s.git(ctx, dir, "--git-dir="+gitDir, "--work-tree="+dir, "checkout", "--quiet", "--force", rev, "--", "."); err != nil {
		return fmt.Errorf("checking out %s of %s: %w", rev, repo.Spec.URL, err)
	}
	return ignore(dir, repo.Spec.Ignore)
}

// ignore removes from a checkout in dir what source-controller leaves out
// of a git source's artifact: what the repository's .sourceignore files and
// the GitRepository's ignore patterns match, or, with neither, Flux's
// default patterns (CI configuration, images, archives, …); version
// control files always.
func ignore(dir string, patterns *string) error {
	domain := strings.Split(dir, string(filepath.Separator))
	ps, err := sourceignore.LoadIgnorePatterns(dir, domain)
	if err != nil {
		return fmt.Errorf("reading .sourceignore: %w", err)
	}
	if patterns != nil {
		ps = append(ps, sourceignore.ReadPatterns(strings.NewReader(*patterns), domain)...)
	}
	matcher := sourceignore.NewDefaultMatcher(ps, domain)
	if len(ps) > 0 {
		matcher = sourceignore.NewMatcher(append(sourceignore.VCSPatterns(domain), ps...))
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !matcher.Match(strings.Split(path, string(filepath.Separator)), false) {
			return err
		}
		return os.Remove(path)
	})
}

// fetch fetches the commit a GitRepository pins into a git directory of
// its own, and returns it and the revision to check out.
func (s *Sources) fetch(ctx context.Context, repo *sourcev1.GitRepository) (gitDir, rev string, err error) {
	spec := repo.Spec
	if !gitURL.MatchString(spec.URL) {
		return "", "", fmt.Errorf("source.git.url %q: want https://, http:// or ssh://", spec.URL)
	}
	ref := spec.Reference
	rev = ref.Commit
	if ref.Tag != "" {
		rev = "refs/tags/" + ref.Tag
	}
	key := spec.URL + "@" + rev
	if dir, ok := s.checkouts[key]; ok {
		return dir, rev, nil
	}
	gitDir, err = os.MkdirTemp(s.dir, "git-")
	if err != nil {
		return "", "", err
	}
	if err := s.git(ctx, gitDir, "init", "--quiet", "--bare"); err != nil {
		return "", "", err
	}
	if ref.Tag != "" {
		err = s.git(ctx, gitDir, "fetch", "--quiet", "--depth=1", "--", spec.URL, "+"+rev+":"+rev)
	} else if err = s.git(ctx, gitDir, "fetch", "--quiet", "--depth=1", "--", spec.URL, rev); err != nil {
		// A server that refuses a bare commit is fetched in full.
		err = s.git(ctx, gitDir, "fetch", "--quiet", "--", spec.URL, "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
	}
	if err != nil {
		return "", "", fmt.Errorf("fetching %s at %s: %w", spec.URL, rev, err)
	}
	s.checkouts[key] = gitDir
	return gitDir, rev, nil
}

// readOnlyStore is a git credential helper answering from the credentials
// file named by $FLEETCTL_GIT_CREDENTIALS and nothing else: git's own
// store helper would also erase a credential the server refused, or store
// one, changing the user's file.
const readOnlyStore = `!f() { test "$1" = get && exec git credential-store --file="$FLEETCTL_GIT_CREDENTIALS" get; }; f`

// git runs the git CLI in dir, never prompting, speaking only http(s) and
// ssh, and with the credentials file, read only, as its only credential
// store.
func (s *Sources) git(ctx context.Context, dir string, args ...string) error {
	sub := args[slices.IndexFunc(args, func(a string) bool { return !strings.HasPrefix(a, "-") })]
	env := append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ALLOW_PROTOCOL=http:https:ssh")
	if s.creds != nil && s.creds.File != "" {
		args = append([]string{"-c", "credential.helper=", "-c", "credential.helper=" + readOnlyStore}, args...)
		env = append(env, "FLEETCTL_GIT_CREDENTIALS="+s.creds.File)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %w: %s", sub, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Chart returns the chart a HelmRelease installs from src: chart name at an
// exact version from a HelmRepository (an https repository's index and
// archive, or an oci registry's artifact), the chart at path name of a
// GitRepository, or the chart archive an OCIRepository's artifact holds.
// A chart from git is loaded as it is in the repository: its version is
// not suffixed with the commit as source-controller's is, and dependencies
// not kept in its charts/ directory are missing.
func (s *Sources) Chart(ctx context.Context, src client.Object, name, version string) (*chart.Chart, error) {
	switch src := src.(type) {
	case *sourcev1.HelmRepository:
		return s.repositoryChart(src, name, version)
	case *sourcev1.GitRepository:
		dir, err := os.MkdirTemp(s.dir, "chart-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if err := s.CheckoutTo(ctx, src, dir); err != nil {
			return nil, err
		}
		path, err := securejoin.SecureJoin(dir, name)
		if err != nil {
			return nil, fmt.Errorf("package.helm.chart %q: %w", name, err)
		}
		ch, err := loader.Load(path)
		if err != nil {
			return nil, fmt.Errorf("chart %s of %s: %w", name, src.Spec.URL, inDir(err, dir))
		}
		return ch, nil
	case *sourcev1.OCIRepository:
		layer, err := s.pullLayer(ctx, src)
		if err != nil {
			return nil, fmt.Errorf("chart artifact %s: %w", src.Spec.URL, err)
		}
		ch, err := loader.Load(layer)
		if err != nil {
			return nil, fmt.Errorf("chart artifact %s: %w", src.Spec.URL, err)
		}
		return ch, nil
	}
	return nil, fmt.Errorf("a chart cannot be read from a %T offline", src)
}

// repositoryChart returns a chart at an exact version from a
// HelmRepository.
func (s *Sources) repositoryChart(repo *sourcev1.HelmRepository, name, version string) (*chart.Chart, error) {
	url := repo.Spec.URL
	if !helmURL.MatchString(url) {
		return nil, fmt.Errorf("source.helm.url %q: want https://, http:// or oci://", url)
	}
	key := url + " " + name + "@" + version
	if ch, ok := s.charts[key]; ok {
		return ch, nil
	}
	var archive []byte
	var err error
	if repo.Spec.Type == sourcev1.HelmRepositoryTypeOCI {
		archive, err = s.pullOCI(url, name, version)
	} else {
		archive, err = s.download(url, name, version)
	}
	if err != nil {
		return nil, fmt.Errorf("chart %s %s from %s: %w", name, version, url, err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("chart %s %s from %s: %w", name, version, url, err)
	}
	s.charts[key] = ch
	return ch, nil
}

// download fetches a chart archive through an https repository's index,
// as helm pull --repo does; credentials go only to the repository's host.
func (s *Sources) download(url, name, version string) ([]byte, error) {
	user, password := s.creds.For(url)
	getters := getter.Providers{{Schemes: []string{"http", "https"}, New: getter.NewHTTPGetter}}
	cr, err := helmrepo.NewChartRepository(&helmrepo.Entry{Name: "offline", URL: url, Username: user, Password: password}, getters)
	if err != nil {
		return nil, err
	}
	cr.CachePath = filepath.Join(s.dir, "helm")
	index, err := cr.DownloadIndexFile()
	if err != nil {
		return nil, err
	}
	entries, err := helmrepo.LoadIndexFile(index)
	if err != nil {
		return nil, err
	}
	cv, err := entries.Get(name, version)
	if err != nil || len(cv.URLs) == 0 {
		return nil, fmt.Errorf("version %s not in the repository's index", version)
	}
	chartURL, err := helmrepo.ResolveReferenceURL(url, cv.URLs[0])
	if err != nil {
		return nil, err
	}
	buf, err := cr.Client.Get(chartURL, getter.WithURL(url), getter.WithBasicAuth(user, password))
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pullOCI pulls a chart from an oci registry, as helm pull oci://… does.
func (s *Sources) pullOCI(url, name, version string) ([]byte, error) {
	var opts []registry.ClientOption
	if user, password := s.creds.For(url); user != "" {
		opts = append(opts, registry.ClientOptBasicAuth(user, password))
	}
	if s.plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	ref := strings.TrimSuffix(strings.TrimPrefix(url, "oci://"), "/") + "/" + name + ":" + version
	pulled, err := client.Pull(ref, registry.PullOptWithChart(true))
	if err != nil {
		return nil, err
	}
	return pulled.Chart.Data, nil
}
