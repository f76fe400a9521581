package watch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tetherhq/tether/internal/inventory"
)

// apiServer asks the API server what the watcher needs beyond list and
// watch: which APIs it serves (discovery) and what the agent's own service
// account may do (SelfSubjectAccessReviews). It speaks JSON over the same
// authenticated HTTP client as the reflectors, into small local structs:
// client-go's discovery package and typed clients link every built-in API
// type into the binary and register them at start, which costs the agent
// megabytes of memory for types it never uses.
type apiServer struct {
	client *http.Client
	host   string // scheme://host:port, no trailing slash
}

// newAPIServer returns an apiServer for cfg, as the pod's service account
// (serviceAccountTransport).
func newAPIServer(cfg Config) (apiServer, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return apiServer{}, fmt.Errorf("the API server's address %q is not an https:// URL", cfg.Host)
	}
	t := &serviceAccountTransport{tokenFile: cfg.TokenFile, caFile: cfg.CAFile, userAgent: cfg.UserAgent, every: cmp.Or(cfg.TokenReread, serviceAccountReread)}
	if err := t.readCA(); err != nil {
		return apiServer{}, err
	}
	return apiServer{
		client: &http.Client{Transport: t},
		host:   strings.TrimSuffix(u.String(), "/"),
	}, nil
}

// acceptDiscovery asks for aggregated discovery (every group's versions and
// resources in one answer), and takes the older lists from a server that
// doesn't serve it.
const acceptDiscovery = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"

// maxAnswerBytes bounds one answer read whole: a discovery answer (a
// cluster with hundreds of CRDs answers a few MB) or a page of a list.
const maxAnswerBytes = 64 << 20

// errAnswerTooLarge is wrapped by the error for an answer over the bound.
var errAnswerTooLarge = errors.New("the answer is too large")

// do sends one request and decodes a 2xx answer's JSON into out, or returns
// the API server's message as the error.
func (a apiServer) do(ctx context.Context, method, path, accept string, body []byte, out any) error {
	return a.doAtMost(ctx, method, path, accept, body, out, maxAnswerBytes)
}

// doAtMost is do for an answer of at most limit bytes.
func (a apiServer) doAtMost(ctx context.Context, method, path, accept string, body []byte, out any, limit int) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.host+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", accept)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if len(b) > limit {
		return fmt.Errorf("%s %s: %w: more than %d bytes", method, path, errAnswerTooLarge, limit)
	}
	if resp.StatusCode/100 != 2 {
		return &statusError{code: resp.StatusCode, msg: fmt.Sprintf("%s %s: %s", method, path, statusMessage(b, resp.Status))}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// getEach sends a GET for a list, and hands each of its items to each as it
// is decoded, then returns the list's metadata: only one object is ever
// decoded at a time, however large the page (a page of Argo Workflows,
// whose statuses can be a megabyte each, decodes into maps several times
// its size). An answer over limit bytes fails with errAnswerTooLarge.
func (a apiServer) getEach(ctx context.Context, path string, limit int, each func(map[string]any)) (listMeta, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", a.host+path, nil)
	if err != nil {
		return listMeta{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return listMeta{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return listMeta{}, readStatusError(resp, "GET "+path)
	}
	body := &atMost{r: resp.Body, left: int64(limit)}
	meta, err := decodeList(body, each)
	if errors.Is(err, errAnswerTooLarge) {
		return listMeta{}, fmt.Errorf("GET %s: %w: more than %d bytes", path, errAnswerTooLarge, limit)
	}
	if err != nil {
		return listMeta{}, fmt.Errorf("GET %s: %w", path, err)
	}
	return meta, nil
}

// listMeta is a list's metadata.
type listMeta struct {
	ResourceVersion string `json:"resourceVersion"`
	Continue        string `json:"continue"`
}

// decodeList reads a list's JSON from r, handing each item to each, and
// returns its metadata. Other fields are skipped.
func decodeList(r io.Reader, each func(map[string]any)) (listMeta, error) {
	var meta listMeta
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return meta, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return meta, err
		}
		switch tok {
		case "metadata":
			if err := dec.Decode(&meta); err != nil {
				return meta, err
			}
		case "items":
			tok, err := dec.Token()
			if err != nil {
				return meta, err
			}
			if tok == nil {
				continue // "items": null
			}
			if d, ok := tok.(json.Delim); !ok || d != '[' {
				return meta, fmt.Errorf("items is %v, not a list", tok)
			}
			for dec.More() {
				var o map[string]any
				if err := dec.Decode(&o); err != nil {
					return meta, err
				}
				if o != nil {
					each(o)
				}
			}
			if _, err := dec.Token(); err != nil { // ]
				return meta, err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return meta, err
			}
		}
	}
	_, err := dec.Token() // }
	return meta, err
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %v, got %v", want, tok)
	}
	return nil
}

// atMost reads from r and fails with errAnswerTooLarge past left bytes.
type atMost struct {
	r    io.Reader
	left int64
}

func (l *atMost) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, errAnswerTooLarge
	}
	return n, err
}

// statusError is an API server's refusal.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// readStatusError reads a refusal's body as an error.
func readStatusError(resp *http.Response, what string) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return &statusError{code: resp.StatusCode, msg: what + ": " + statusMessage(b, resp.Status)}
}

// statusMessage is the message of a metav1.Status body, or the HTTP status.
func statusMessage(body []byte, status string) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return st.Message
	}
	return status
}

// discovered is what a cluster serves: for each API group ("" is the core
// group), its versions, the server's preferred first.
type discovered map[string][]servedVersion

type servedVersion struct {
	version   string
	resources []string // top-level resources; no subresources
	// clusterScoped are those of resources that are not namespaced: an
	// extra kind's scope is known only from discovery.
	clusterScoped []string
}

// aggregatedDiscovery is the part of an apidiscovery.k8s.io/v2
// APIGroupDiscoveryList the watcher reads.
type aggregatedDiscovery struct {
	Kind  string `json:"kind"`
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Versions []struct {
			Version   string `json:"version"`
			Resources []struct {
				Resource string `json:"resource"`
				Scope    string `json:"scope"`
			} `json:"resources"`
		} `json:"versions"`
	} `json:"items"`
}

// errNotAggregated is returned for a discovery answer in the older format.
var errNotAggregated = errors.New("not an aggregated discovery list")

// parseAggregated adds an APIGroupDiscoveryList (the answer to GET /api or
// /apis with acceptDiscovery) to d. It returns errNotAggregated when the
// JSON is another kind, as from a server without aggregated discovery.
func parseAggregated(b []byte, d discovered) error {
	var list aggregatedDiscovery
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	if list.Kind != "APIGroupDiscoveryList" {
		return errNotAggregated
	}
	for _, g := range list.Items {
		for _, v := range g.Versions {
			if v.Version == "" {
				continue
			}
			sv := servedVersion{version: v.Version}
			for _, r := range v.Resources {
				if r.Resource != "" && !strings.Contains(r.Resource, "/") {
					sv.resources = append(sv.resources, r.Resource)
					if r.Scope == "Cluster" {
						sv.clusterScoped = append(sv.clusterScoped, r.Resource)
					}
				}
			}
			d[g.Metadata.Name] = append(d[g.Metadata.Name], sv)
		}
	}
	return nil
}

// parseResourceList reads an APIResourceList (the answer to GET /api/v1 or
// /apis/<group>/<version>) as one served version.
func parseResourceList(b []byte) (servedVersion, error) {
	var list struct {
		GroupVersion string `json:"groupVersion"`
		Resources    []struct {
			Name       string `json:"name"`
			Namespaced bool   `json:"namespaced"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return servedVersion{}, err
	}
	gv, err := schema.ParseGroupVersion(list.GroupVersion)
	if err != nil {
		return servedVersion{}, err
	}
	if gv.Version == "" {
		return servedVersion{}, fmt.Errorf("no version in %q", list.GroupVersion)
	}
	sv := servedVersion{version: gv.Version}
	for _, r := range list.Resources {
		if r.Name != "" && !strings.Contains(r.Name, "/") {
			sv.resources = append(sv.resources, r.Name)
			if !r.Namespaced {
				sv.clusterScoped = append(sv.clusterScoped, r.Name)
			}
		}
	}
	return sv, nil
}

// versionsFor maps each of kinds the cluster serves to the version to watch:
// the cluster's preferred version of it when the summary understands that
// one, otherwise the first of the kind's Versions the cluster serves.
func versionsFor(kinds []inventory.Kind, d discovered) map[schema.GroupResource]string {
	out := map[schema.GroupResource]string{}
	for _, k := range kinds {
		vs := d[k.Group]
		// The preferred version of a resource is the first of its
		// group's versions, in the server's order, that serves it.
		for _, v := range vs {
			if slices.Contains(v.resources, k.Plural()) {
				if slices.Contains(k.Versions, v.version) {
					out[k.Resource()] = v.version
				}
				break
			}
		}
		if _, ok := out[k.Resource()]; ok {
			continue
		}
		for _, want := range k.Versions {
			if slices.ContainsFunc(vs, func(v servedVersion) bool { return v.version == want && slices.Contains(v.resources, k.Plural()) }) {
				out[k.Resource()] = want
				break
			}
		}
	}
	return out
}

// namespaced says whether the cluster serves resource of group at version
// in namespaces, and whether it serves it at all.
func (d discovered) namespaced(group, version, resource string) (namespaced, served bool) {
	for _, v := range d[group] {
		if v.version == version && slices.Contains(v.resources, resource) {
			return !slices.Contains(v.clusterScoped, resource), true
		}
	}
	return false, false
}

// discover asks the API server which groups, versions and resources it
// serves. With aggregated discovery that is GET /api and /apis; from a
// server without it, the resource list of each version of the kinds'
// groups the summary understands. A partial answer (one aggregated API
// down) still names the rest, with the error.
func (a apiServer) discover(ctx context.Context, kinds []inventory.Kind) (discovered, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d := discovered{}
	var errs []error
	legacy := false
	for _, path := range []string{"/api", "/apis"} {
		var raw json.RawMessage
		if err := a.do(ctx, "GET", path, acceptDiscovery, nil, &raw); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := parseAggregated(raw, d); errors.Is(err, errNotAggregated) {
			legacy = true
		} else if err != nil {
			errs = append(errs, fmt.Errorf("GET %s: %w", path, err))
		}
	}
	if !legacy {
		return d, errors.Join(errs...)
	}
	return a.discoverLegacy(ctx, kinds)
}

// discoverLegacy asks a server without aggregated discovery for the
// resource list of each version of kinds the summary understands. It can't
// tell the server's preferred version, so the first of a kind's Versions
// that is served wins.
func (a apiServer) discoverLegacy(ctx context.Context, kinds []inventory.Kind) (discovered, error) {
	d := discovered{}
	var errs []error
	seen := map[schema.GroupVersion]bool{}
	for _, k := range kinds {
		for _, v := range k.Versions {
			gv := schema.GroupVersion{Group: k.Group, Version: v}
			if seen[gv] {
				continue
			}
			seen[gv] = true
			path := "/apis/" + gv.String()
			if gv.Group == "" {
				path = "/api/" + v
			}
			var raw json.RawMessage
			if err := a.do(ctx, "GET", path, "application/json", nil, &raw); err != nil {
				var se *statusError
				if !errors.As(err, &se) || se.code != http.StatusNotFound {
					errs = append(errs, fmt.Errorf("GET %s: %w", path, err))
				}
				continue
			}
			sv, err := parseResourceList(raw)
			if err != nil {
				errs = append(errs, fmt.Errorf("GET %s: %w", path, err))
				continue
			}
			d[gv.Group] = append(d[gv.Group], sv)
		}
	}
	return d, errors.Join(errs...)
}

// allowed asks the API server, with a SelfSubjectAccessReview, whether the
// agent may verb resource of group in namespace ns ("" for every namespace).
func (a apiServer) allowed(ctx context.Context, verb, group, resource, ns string) (bool, error) {
	attrs := map[string]string{"verb": verb, "group": group, "resource": resource}
	if ns != "" {
		attrs["namespace"] = ns
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "authorization.k8s.io/v1",
		"kind":       "SelfSubjectAccessReview",
		"spec":       map[string]any{"resourceAttributes": attrs},
	})
	if err != nil {
		return false, err
	}
	var review struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	if err := a.do(ctx, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", body, &review); err != nil {
		return false, err
	}
	return review.Status.Allowed, nil
}
