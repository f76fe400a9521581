package tunnel

// The WebSocket handshake: the hub's upgrade of an agent's request, and the
// agent's dial, through its proxy when one is set.

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/gather"
)

// acceptKey is the Sec-WebSocket-Accept that answers key.
func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// headerHas reports whether a comma-separated header holds token, as
// Connection: keep-alive, Upgrade does.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// upgrade answers a WebSocket upgrade request with 101 and takes over its
// connection, or answers with an error and returns it.
func upgrade(w http.ResponseWriter, r *http.Request) (net.Conn, error) {
	fail := func(status int, why string) (net.Conn, error) {
		if status == http.StatusUpgradeRequired {
			w.Header().Set("Sec-WebSocket-Version", "13")
		}
		http.Error(w, why, status)
		return nil, fmt.Errorf("%w: %s", ErrBadHandshake, why)
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	switch {
	case r.Method != http.MethodGet:
		return fail(http.StatusMethodNotAllowed, "a WebSocket upgrade must be a GET")
	case !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket"):
		return fail(http.StatusUpgradeRequired, "this is a WebSocket: the request must upgrade to one")
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return fail(http.StatusUpgradeRequired, "WebSocket version 13 is the one spoken here")
	}
	if k, err := base64.StdEncoding.DecodeString(key); err != nil || len(k) != 16 {
		return fail(http.StatusBadRequest, "the WebSocket key is not 16 bytes in base64")
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fail(http.StatusInternalServerError, "the connection can't be taken over: "+err.Error())
	}
	if brw.Reader.Buffered() > 0 {
		conn.Close()
		return nil, fmt.Errorf("%w: the client sent data before the handshake was done", ErrBadHandshake)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+acceptKey(key)+"\r\n\r\n")
	conn.SetDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// upgraded is a client's connection once the server answered 101: what
// net/http hands over (it may hold bytes read past the answer), the socket
// under it for deadlines, and, under TLS, the gather.Conn that gathers each
// frame's records.
type upgraded struct {
	rw    io.ReadWriteCloser
	raw   net.Conn
	batch *gather.Conn
}

// wsConn makes the client's side of the WebSocket on u.
func (u upgraded) wsConn(readBuffer int, cfg Config) *wsConn {
	c := newWSConn(u.rw, u.raw, readBuffer, true, cfg)
	c.batch = u.batch
	return c
}

// dialWebSocket makes the upgrade request through net/http, which brings
// proxies (HTTPS_PROXY, NO_PROXY) and TLS, and returns the connection
// after a valid 101. Any other answer is returned with ErrBadHandshake.
func dialWebSocket(ctx context.Context, rawURL string, opts DialOptions) (upgraded, *http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return upgraded{}, nil, err
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return upgraded{}, nil, fmt.Errorf("tunnel: %q is not a ws:// or wss:// URL", rawURL)
	}
	var nonce [16]byte
	rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return upgraded{}, nil, err
	}
	for k, v := range opts.Header {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", key)

	// net/http CONNECTs through a proxy to https targets, but sends plain
	// http requests to it as they are, and few proxies pass an upgrade on.
	// So for ws:// the dial CONNECTs itself, as for wss://.
	var tunnelProxy *url.URL
	if opts.DialContext != nil {
		opts.Proxy = nil
	}
	if opts.Proxy != nil && u.Scheme == "http" {
		if tunnelProxy, err = opts.Proxy(req); err != nil {
			return upgraded{}, nil, err
		}
	}
	var (
		mu    sync.Mutex // guards raw and batch, set by the transport's dial
		raw   net.Conn
		batch *gather.Conn
	)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dial := func() (net.Conn, error) { return dialThrough(ctx, tunnelProxy, addr) }
			if opts.DialContext != nil {
				dial = func() (net.Conn, error) { return opts.DialContext(ctx, network, addr) }
			}
			c, err := dial()
			if err != nil {
				return nil, err
			}
			var b *gather.Conn
			if u.Scheme == "https" {
				// Under TLS, gather each frame's records into one
				// write: a 256 KiB frame costs one system call, not
				// seventeen (decision 010). No limit: a frame is at
				// most maxFrame. With a proxy, this is the connection
				// to the proxy, below every TLS layer.
				b = &gather.Conn{Conn: c}
				c = b
			}
			mu.Lock()
			raw, batch = c, b
			mu.Unlock()
			return c, nil
		},
		TLSClientConfig:        opts.TLSConfig,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	if u.Scheme == "https" {
		tr.Proxy = opts.Proxy
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return upgraded{}, nil, err
	}
	if err := checkUpgrade(resp, key); err != nil {
		resp.Body.Close()
		// A server may keep the refused connection alive; nothing will
		// use this transport again.
		tr.CloseIdleConnections()
		return upgraded{}, resp, err
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	mu.Lock()
	defer mu.Unlock()
	if !ok || raw == nil {
		resp.Body.Close()
		return upgraded{}, resp, fmt.Errorf("%w: no connection to take over", ErrBadHandshake)
	}
	return upgraded{rw: rw, raw: raw, batch: batch}, resp, nil
}

// dialThrough connects to addr, through an HTTP proxy's CONNECT when proxy
// is set.
func dialThrough(ctx context.Context, proxy *url.URL, addr string) (net.Conn, error) {
	var d net.Dialer
	if proxy == nil {
		return d.DialContext(ctx, "tcp", addr)
	}
	if proxy.Scheme != "http" {
		return nil, fmt.Errorf("tunnel: proxy %s: only http:// proxies carry ws:// connections", proxy.Redacted())
	}
	paddr := proxy.Host
	if proxy.Port() == "" {
		paddr = net.JoinHostPort(proxy.Hostname(), "80")
	}
	c, err := d.DialContext(ctx, "tcp", paddr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if u := proxy.User; u != nil {
		p, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+p)))
	}
	// The proxy's answer is read a byte at a time, so nothing after it
	// is taken from the connection.
	resp, err := func() (*http.Response, error) {
		if err := req.Write(c); err != nil {
			return nil, err
		}
		return http.ReadResponse(bufio.NewReaderSize(oneByteReader{c}, 16), req)
	}()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("tunnel: proxy %s answered CONNECT with %s", proxy.Redacted(), resp.Status)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// oneByteReader reads at most a byte per call.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

// checkUpgrade says whether resp accepts the upgrade asked for with key.
func checkUpgrade(resp *http.Response, key string) error {
	switch {
	case resp.StatusCode != http.StatusSwitchingProtocols:
		return fmt.Errorf("%w: the hub answered %s", ErrBadHandshake, resp.Status)
	case !headerHas(resp.Header, "Upgrade", "websocket") || !headerHas(resp.Header, "Connection", "upgrade"):
		return fmt.Errorf("%w: the 101 does not upgrade to a WebSocket", ErrBadHandshake)
	case resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key):
		return fmt.Errorf("%w: the 101's Sec-WebSocket-Accept does not match the key", ErrBadHandshake)
	case resp.Header.Get("Sec-WebSocket-Extensions") != "":
		return fmt.Errorf("%w: the hub chose extensions nobody asked for", ErrBadHandshake)
	}
	return nil
}
