package kubeproxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Where a cluster's answer may send a client: back into that cluster's
// prefix on the hub, nowhere else (issue 33). kubectl and client-go follow
// a redirect with the person's token (client-go's transport adds it to
// every request, the redirected ones too), and a hub-issued token is good
// on every cluster of theirs for hours: a pod behind a service proxy, an
// aggregated API, or the agent's API server itself could collect it with a
// 302 to a host of its own, even over plain http.

// confineLocations rewrites the Location and Content-Location of resp, the
// API server's answer to a request on route rt, that name the API server
// (or a path on it) into the hub's URL for that cluster, and drops the
// others. It returns the first one dropped, and whether resp is a redirect
// that led off the cluster, which must not reach the client at all.
func (px *Proxy) confineLocations(resp *http.Response, rt route) (dropped string, offCluster bool) {
	// 304 Not Modified is no redirect: no client follows its Location.
	redirect := resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified
	for _, key := range [...]string{"Location", "Content-Location"} {
		vs, ok := resp.Header[key]
		if !ok {
			continue
		}
		// Two of them: clients take either, so neither is sure.
		var to string
		if len(vs) == 1 {
			to, ok = clusterLocation(vs[0], resp.Request.URL, px.clusterURL(rt.conn.Cluster()))
		} else {
			ok = false
		}
		if ok {
			resp.Header[key] = []string{to}
			continue
		}
		delete(resp.Header, key)
		if dropped == "" {
			dropped = strings.Join(vs, ", ")
		}
		if key == "Location" && redirect {
			offCluster = true
		}
	}
	return dropped, offCluster
}

// clusterURL is the hub's address for cluster name, as kubeconfigs name
// it: the public URL's, or without one, its path on the hub.
func (px *Proxy) clusterURL(name string) string {
	if px.cfg.PublicURL == "" {
		return px.clusterPrefix(name)
	}
	return strings.TrimSuffix(px.cfg.PublicURL, "/") + "/clusters/" + name
}

// maxLocation is the longest Location the hub rewrites; a longer one is
// dropped, as no API server sends one.
const maxLocation = 8 << 10

// clusterLocation returns where loc, a Location or Content-Location in an
// answer to a request for api (the URL the hub asked the API server for),
// points under cluster, the cluster's URL on the hub: loc must be a
// reference to the API server the hub dialed (its https URL, or a path
// relative to api), and ok is false for anything else.
//
// A Location is read as Go's clients read it (client-go follows a
// redirect as net/http resolves it), and refused where other readers may
// differ: backslashes (browsers take them for slashes: /\evil.example is
// //evil.example), ///evil.example (a path to Go, a host to browsers),
// control characters and spaces, which no URI holds, bytes beyond ASCII,
// and dot segments left escaped (%2e%2e: browsers, and the hub's own
// router, take them for .., out of the cluster's prefix).
func clusterLocation(loc string, api *url.URL, cluster string) (string, bool) {
	if loc == "" || len(loc) > maxLocation {
		return "", false
	}
	for i := 0; i < len(loc); i++ {
		if c := loc[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return "", false
		}
	}
	ref, err := url.Parse(loc)
	if err != nil || ref.Host == "" && strings.HasPrefix(loc, "//") {
		return "", false
	}
	to := api.ResolveReference(ref)
	if to.Scheme != "https" || to.Opaque != "" || to.Host == "" || !sameHost(to.Host, api.Host) {
		return "", false
	}
	path := to.EscapedPath()
	for seg := range strings.SplitSeq(path, "/") {
		if d, err := url.PathUnescape(seg); err != nil || d == "." || d == ".." {
			return "", false
		}
	}
	if path == "" {
		path = "/"
	}
	// Who the API server's URL named in it (user:password@) is left out:
	// the hub is no place for it.
	out := cluster + path
	if to.ForceQuery || to.RawQuery != "" {
		out += "?" + to.RawQuery
	}
	if to.Fragment != "" {
		out += "#" + to.EscapedFragment()
	}
	return out, true
}

// sameHost reports whether a and b, hosts with optional ports, name the
// same server over https: in any case, 443 said or not.
func sameHost(a, b string) bool {
	norm := func(h string) string { return strings.TrimSuffix(strings.ToLower(h), ":443") }
	return norm(a) == norm(b)
}

// refuseRedirect replaces resp, a redirect off the cluster, with a 502
// whose Status says why: what the hub sends the client instead.
func refuseRedirect(resp *http.Response, cluster, location string) {
	resp.Body.Close()
	msg := fmt.Sprintf("Cluster %q answered with a redirect to %s, away from the cluster. Tether passes on no such redirect: your client would follow it, and send your token there.",
		cluster, describeLocation(location))
	body := statusBody(http.StatusBadGateway, "BadGateway", msg)
	resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
	resp.Header = http.Header{
		"Content-Type":           {"application/json"},
		"X-Content-Type-Options": {"nosniff"},
		"Content-Length":         {strconv.Itoa(len(body))},
	}
	resp.ContentLength, resp.TransferEncoding, resp.Trailer = int64(len(body)), nil, nil
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if resp.Request.Method == http.MethodHead {
		resp.Body = http.NoBody
	}
}

// describeLocation names where location points, for people: its scheme
// and host, cut short, when it has them.
func describeLocation(location string) string {
	u, err := url.Parse(location)
	if err != nil || u.Host == "" || strings.ContainsAny(location, "\\\x00\r\n\t ") {
		return "a location that isn't a plain URL of the cluster's API server"
	}
	d := u.Scheme + "://" + u.Host
	if u.Scheme == "" {
		d = "//" + u.Host
	}
	if len(d) > 100 {
		d = strings.ToValidUTF8(d[:100], "") + "…"
	}
	return strconv.Quote(d)
}

// logRefusedRedirect says that a cluster answered rt's request with a
// redirect away from it, once per cluster per the limiter's window: its pods
// answer what they like, as often as they are asked.
func (px *Proxy) logRefusedRedirect(rt route) {
	name := rt.conn.Cluster()
	if suppressed, ok := px.refusals.Allow("redirect\x00" + name); ok {
		px.log.Warn("A cluster answered a request with a redirect away from it; Tether answered 502 instead (the audit line's location says where to)",
			"cluster", name, "user", rt.person.Name, "request", rt.id, "suppressed", suppressed)
	}
}
