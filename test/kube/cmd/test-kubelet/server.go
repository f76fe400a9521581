//go:build unix

package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// server is the kubelet API: the part of Kubernetes' kubelet server
// (pkg/kubelet/server/server.go) that the API server's pod subresources
// call, and /healthz.
type server struct {
	k       *kubelet
	streams streaming.Server
	log     *slog.Logger
}

func newServer(k *kubelet, streams streaming.Server, log *slog.Logger) *server {
	return &server{k: k, streams: streams, log: log}
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", s.containerLogs)
	// Exec, attach and port-forward answer GET (WebSocket) and POST
	// (SPDY), with or without the Pod's UID in the path.
	for _, p := range []string{"/exec/{ns}/{pod}/{container}", "/exec/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(p, s.exec)
	}
	for _, p := range []string{"/attach/{ns}/{pod}/{container}", "/attach/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(p, s.attach)
	}
	for _, p := range []string{"/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{uid}"} {
		mux.HandleFunc(p, s.portForward)
	}
	return mux
}

// containerID names a container to the streaming server: the Pod's UID
// and the container's name, so that an exec reaches the current run.
func containerID(uid types.UID, name string) string { return string(uid) + "/" + name }

// lookup finds the Pod and container a request names, answering 404 if
// there is none.
func (s *server) lookup(w http.ResponseWriter, r *http.Request) (*podWorker, *container, bool) {
	p := s.k.podByName(r.PathValue("ns"), r.PathValue("pod"), types.UID(r.PathValue("uid")))
	if p == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s does not exist on this node", r.PathValue("ns"), r.PathValue("pod")), http.StatusNotFound)
		return nil, nil, false
	}
	name := r.PathValue("container")
	if name == "" {
		return p, nil, true
	}
	c, _, _, ok := p.container(name)
	if !ok {
		http.Error(w, fmt.Sprintf("container %q is not in pod %s/%s", name, p.namespace, p.name), http.StatusNotFound)
		return nil, nil, false
	}
	return p, c, true
}

// logStream records how a streaming request arrived, so that tests can
// tell WebSocket from SPDY at the kubelet.
func (s *server) logStream(r *http.Request, kind string) {
	s.log.Info("stream", "kind", kind, "pod", r.PathValue("ns")+"/"+r.PathValue("pod"),
		"upgrade", strings.ToLower(r.Header.Get("Upgrade")),
		"protocols", strings.Join(append(r.Header.Values("Sec-Websocket-Protocol"), r.Header.Values("X-Stream-Protocol-Version")...), ","))
}

func (s *server) exec(w http.ResponseWriter, r *http.Request) {
	s.logStream(r, "exec")
	opts, err := remotecommandserver.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p, c, ok := s.lookup(w, r)
	if !ok {
		return
	}
	resp, err := s.streams.GetExec(&runtimeapi.ExecRequest{
		ContainerId: containerID(p.uid, c.spec.Name),
		Cmd:         r.URL.Query()["command"],
		Tty:         opts.TTY, Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
	})
	if err != nil {
		streaming.WriteError(err, w)
		return
	}
	s.proxyStream(w, r, resp.Url, opts)
}

func (s *server) attach(w http.ResponseWriter, r *http.Request) {
	s.logStream(r, "attach")
	opts, err := remotecommandserver.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p, c, ok := s.lookup(w, r)
	if !ok {
		return
	}
	resp, err := s.streams.GetAttach(&runtimeapi.AttachRequest{
		ContainerId: containerID(p.uid, c.spec.Name),
		Tty:         opts.TTY, Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
	})
	if err != nil {
		streaming.WriteError(err, w)
		return
	}
	s.proxyStream(w, r, resp.Url, opts)
}

// proxyStream hands an exec or attach to the streaming server as the
// kubelet does: SPDY (and WebSocket before v5) passes through; WebSocket
// v5 is translated to SPDY.
func (s *server) proxyStream(w http.ResponseWriter, r *http.Request, streamURL string, opts *remotecommandserver.Options) {
	u, err := url.Parse(streamURL)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		translator.NewStreamTranslatorHandler(u, nil, 0, translator.Options{
			Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
		}).ServeHTTP(w, r)
		return
	}
	proxy.NewUpgradeAwareHandler(u, nil, false, true, responder{s.log}).ServeHTTP(w, r)
}

func (s *server) portForward(w http.ResponseWriter, r *http.Request) {
	s.logStream(r, "portforward")
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	opts := &portforward.V4Options{}
	if !tunnel {
		var err error
		if opts, err = portforward.NewV4Options(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	p, _, ok := s.lookup(w, r)
	if !ok {
		return
	}
	resp, err := s.streams.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: string(p.uid), Port: opts.Ports})
	if err != nil {
		streaming.WriteError(err, w)
		return
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var h http.Handler = proxy.NewUpgradeAwareHandler(u, nil, false, true, responder{s.log})
	if tunnel {
		// SPDY inside WebSocket: unwrapped here and passed on as SPDY.
		h = translator.NewTunnelingHandler(h)
	}
	h.ServeHTTP(w, r)
}

// responder reports a failed proxy to the client.
type responder struct{ log *slog.Logger }

func (r responder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	r.log.Warn("Can't proxy to the streaming server", "err", err)
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

func (s *server) containerLogs(w http.ResponseWriter, r *http.Request) {
	p, c, ok := s.lookup(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	o := logOptions{follow: q.Get("follow") == "true", timestamps: q.Get("timestamps") == "true", tail: -1}
	bad := func(name string, err error) {
		http.Error(w, fmt.Sprintf("%s=%q: %v", name, q.Get(name), err), http.StatusBadRequest)
	}
	var err error
	if v := q.Get("tailLines"); v != "" {
		if o.tail, err = strconv.ParseInt(v, 10, 64); err != nil || o.tail < 0 {
			bad("tailLines", err)
			return
		}
	}
	if v := q.Get("limitBytes"); v != "" {
		if o.limit, err = strconv.ParseInt(v, 10, 64); err != nil || o.limit < 1 {
			bad("limitBytes", err)
			return
		}
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			bad("sinceSeconds", err)
			return
		}
		o.since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		if o.since, err = time.Parse(time.RFC3339, v); err != nil {
			bad("sinceTime", err)
			return
		}
	}
	switch q.Get("stream") {
	case "", "All":
	case "Stdout":
		o.stream = "stdout"
	case "Stderr":
		o.stream = "stderr"
	default:
		bad("stream", fmt.Errorf("want All, Stdout or Stderr"))
		return
	}
	_, cur, prev, _ := p.container(c.spec.Name)
	run := cur
	if q.Get("previous") == "true" {
		run = prev
		if run == nil {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", c.spec.Name, p.name), http.StatusBadRequest)
			return
		}
	}
	if run == nil || run.log == nil {
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start", c.spec.Name, p.name), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	if err := copyLog(r.Context(), run.log, o, flushWriter{w}); err != nil {
		s.log.Debug("Log stream ended", "pod", p.namespace+"/"+p.name, "err", err)
	}
}

// flushWriter sends each write at once, for `logs -f`.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	http.NewResponseController(f.w).Flush()
	return n, err
}
