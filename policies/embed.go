// Package policies embeds fleeet's Rego admission policies, one folder per
// policy, so the manager carries them in its binary.
package policies

import "embed"

// FS holds every policy folder's Rego, tests included (the engine skips
// files ending in _test.rego).
//
//go:embed */*.rego
var FS embed.FS
