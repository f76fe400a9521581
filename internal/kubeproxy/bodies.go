package kubeproxy

import (
	"net/http"
	"time"
)

// CloseUnreadBodies bounds the wait for the body of an HTTP/1 request,
// and has its connection closed after the answer. net/http reads what a
// handler left of a body (up to 256 KiB), before it sends the answer and
// again once the handler is done, with no deadline: the hub's server has
// none, as watches and exec sessions last for hours. So a client that
// declared a body and never sent it held its connection and goroutine for
// as long as it liked, no sign-in needed. The proxy takes both off when
// it forwards the body of a request whose person it knows. HTTP/2 has no
// such wait, and its Connection: close would end the client's other
// streams.
func CloseUnreadBodies(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bodyBounded(r) {
			w.Header().Set("Connection", "close")
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		}
		next.ServeHTTP(w, r)
	})
}

// bodyBounded says whether CloseUnreadBodies bounds r's body: an HTTP/1
// request that has one.
func bodyBounded(r *http.Request) bool { return r.ProtoMajor == 1 && r.ContentLength != 0 }
