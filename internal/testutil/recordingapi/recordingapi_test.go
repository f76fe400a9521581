package recordingapi

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecordsAndAnswers(t *testing.T) {
	for _, plain := range []bool{false, true} {
		s := Start(t, Config{Plain: plain})
		s.Answer("/away", Redirect(http.StatusFound, `/\evil.example`))
		s.Answer("/under/", Reply(http.StatusTeapot, http.Header{"X-A": {"b"}}, "short"))
		c := s.Client()

		req, _ := http.NewRequest("POST", s.URL+"/api/v1/namespaces/x/services/a%2Fb/proxy/?q=1", strings.NewReader("the body"))
		req.Header.Set("Authorization", "Bearer secret-token")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `a%2Fb`) {
			t.Errorf("plain %v: the echo: %d %s", plain, resp.StatusCode, body)
		}
		resp, err = c.Get(s.URL + "/away")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != `/\evil.example` {
			t.Errorf("plain %v: the redirect: %d %q", plain, resp.StatusCode, resp.Header.Get("Location"))
		}
		resp, err = c.Get(s.URL + "/under/deep")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-A") != "b" || string(body) != "short" {
			t.Errorf("plain %v: the reply: %d %v %q", plain, resp.StatusCode, resp.Header, body)
		}

		if err := s.Wait(context.Background(), func(rs []Request) bool { return len(rs) == 3 }); err != nil {
			t.Fatal(err)
		}
		rs := s.Requests()
		if r := rs[0]; r.Method != "POST" || r.RawPath != "/api/v1/namespaces/x/services/a%2Fb/proxy/" || r.Query != "q=1" ||
			r.Bearer != "secret-token" || string(r.Body) != "the body" {
			t.Errorf("plain %v: recorded %+v", plain, r)
		}
		if got := s.Bearers(); len(got) != 1 || !s.Saw("secret-token") || s.Saw("other") {
			t.Errorf("plain %v: bearers %q", plain, got)
		}
	}
}
