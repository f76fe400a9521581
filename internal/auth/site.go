package auth

import (
	"net/http"
	"net/url"
	"strings"
)

// Browsers send the hub's session cookie, and an auth proxy's, with
// requests other sites' pages make. These say which requests a browser
// made for a page not the hub's.

// FromOtherSite reports whether a browser sent r for a page not the hub's:
// with another Origin, or with Fetch Metadata that names another site.
// Browsers send Origin on every cross-site request but a plain GET, such as
// an <img> or <script>, and those carry cookies (an auth proxy's too) when
// the cookie is SameSite=None, or when the page is a sibling of the hub's
// host (same-site: SameSite=Lax and Strict cookies go along). So
// Sec-Fetch-Site refuses what Origin leaves out. With navigationsOK, a
// top-level GET is let through all the same: a link to the fleet page, or a
// sign-in's return, comes from another site. Requests without Fetch
// Metadata (kubectl, curl, older browsers) are judged by Origin alone.
func FromOtherSite(r *http.Request, publicURL string, navigationsOK bool) bool {
	if !SameOrigin(r, publicURL) {
		return true
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return !(navigationsOK && isNavigation(r))
	}
	return false // same-origin, none (typed or bookmarked), or absent
}

// BrowserWithoutFetchMetadata reports whether r says it comes from a
// browser (every browser's User-Agent starts "Mozilla/", and no page can
// change it) yet has no Sec-Fetch-Site: a browser from before Fetch Metadata
// (Safari before 16.4, Firefox before 90), or one on a plain-HTTP address,
// where browsers send none. Another site's plain GET from such a browser
// carries neither Origin nor Fetch Metadata, so FromOtherSite can't see it.
// kubectl, client-go and curl don't say "Mozilla/". Decision 026.
func BrowserWithoutFetchMetadata(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") == "" && strings.HasPrefix(r.Header.Get("User-Agent"), "Mozilla/")
}

// isNavigation reports whether a browser sent r to open a page in a window
// or tab of its own: not in a frame, and by GET, so nothing changes.
func isNavigation(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
}

// SameOrigin reports whether r has no Origin header, or that of publicURL,
// the hub's own.
func SameOrigin(r *http.Request, publicURL string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	pub, err := url.Parse(publicURL)
	if err != nil || pub.Host == "" {
		return false
	}
	// Browsers leave a scheme's default port out of Origin, whether or not
	// the address they opened named it.
	host := pub.Host
	if port := pub.Port(); port == "443" && pub.Scheme == "https" || port == "80" && pub.Scheme == "http" {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return strings.EqualFold(origin, pub.Scheme+"://"+host)
}
