// Package crd embeds the CustomResourceDefinitions controller-gen writes into
// bases/ (make generate), so a binary can install or upgrade the ones it
// owns: the fleet-agent upgrades Assemblage and Upstream at start, which
// Helm never does for a chart's crds/.
package crd

import "embed"

// Bases holds bases/fleeet.dev_<plural>.yaml, one CRD per file.
//
//go:embed bases/*.yaml
var Bases embed.FS
