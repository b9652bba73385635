package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/fleeet-dev/fleeet/config/crd"
)

// OwnCRDs are the CustomResourceDefinitions the agent chart installs and the
// agent upgrades with itself.
var OwnCRDs = []string{"assemblages.fleeet.dev", "upstreams.fleeet.dev"}

// Annotations the agent writes on the CRDs it upgrades: which agent version
// wrote them, and the digest of what it wrote, so the next start compares
// one annotation instead of a spec the apiserver has defaulted.
const (
	CRDVersionAnnotation = "fleeet.dev/agent-version"
	CRDDigestAnnotation  = "fleeet.dev/crd-digest"
)

// UpgradeCRDs brings each of OwnCRDs that is installed to the definition
// built into this agent, with server-side apply as field owner owner, when
// it differs from what a previous start applied. It never creates one (the
// chart installs them, and create cannot be limited by name), never
// deletes, and never downgrades a CRD an agent newer than version applied.
// Each CRD it could not read or write is an error naming it.
func UpgradeCRDs(ctx context.Context, c client.Client, owner, version string) error {
	log := logr.FromContextOrDiscard(ctx)
	var errs []error
	for _, name := range OwnCRDs {
		if err := upgradeCRD(ctx, c, log, name, owner, version); err != nil {
			errs = append(errs, fmt.Errorf("upgrading CustomResourceDefinition %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func upgradeCRD(ctx context.Context, c client.Client, log logr.Logger, name, owner, version string) error {
	plural, group, _ := strings.Cut(name, ".")
	data, err := crd.Bases.ReadFile("bases/" + group + "_" + plural + ".yaml")
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	installed := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, installed); err != nil {
		return err
	}
	switch at := installed.Annotations; {
	case at[CRDDigestAnnotation] == digest:
		return nil
	case newer(at[CRDVersionAnnotation], version):
		log.Info("Leaving a CustomResourceDefinition a newer agent applied", "name", name,
			"metadata.annotations."+CRDVersionAnnotation, at[CRDVersionAnnotation], "version", version)
		return nil
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		return err
	}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	u.SetAnnotations(map[string]string{CRDVersionAnnotation: version, CRDDigestAnnotation: digest})
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return err
	}
	log.Info("Upgraded a CustomResourceDefinition", "name", name, "version", version)
	return nil
}

// newer reports whether release version a is newer than b; false when
// either is not a release.
func newer(a, b string) bool {
	va, err := utilversion.ParseSemantic(a)
	if err != nil {
		return false
	}
	vb, err := utilversion.ParseSemantic(b)
	return err == nil && va.GreaterThan(vb)
}
