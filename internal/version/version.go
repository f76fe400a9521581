// Package version holds the version of this Tether build, set at link time.
package version

// Version is Tether's version. Release builds set it with
// -ldflags "-X github.com/tetherhq/tether/internal/version.Version=v1.2.3".
var Version = "v0.1.0-dev"
