// Package version holds the build's version, stamped at link time with
// -ldflags "-X github.com/fleeet-dev/fleeet/internal/version.Version=v1.2.3".
package version

// Version of the build; "dev" when not stamped.
var Version = "dev"
