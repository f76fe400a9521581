package login

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"
)

// defaultInterval is RFC 8628's poll interval when the hub names none.
const defaultInterval = 5 * time.Second

// signInDevice signs in with RFC 8628's device flow: the hub gives a user
// code, shown on msg, which the person approves on the hub's /device page
// from any browser; the command polls until then.
func signInDevice(ctx context.Context, client *hubClient, msg io.Writer) (signedIn, error) {
	var start struct {
		DeviceCode      string `json:"device_code"`
		UserCode        string `json:"user_code"`
		VerificationURI string `json:"verification_uri"`
		Complete        string `json:"verification_uri_complete"`
		ExpiresIn       int    `json:"expires_in"`
		Interval        *int   `json:"interval"`
	}
	if err := client.post(ctx, "/api/login/device", url.Values{}, &start); err != nil {
		return signedIn{}, fmt.Errorf("device sign-in: %w", err)
	}
	if start.DeviceCode == "" || start.UserCode == "" {
		return signedIn{}, errors.New("device sign-in: the hub's answer holds no code")
	}
	interval := defaultInterval
	if start.Interval != nil && *start.Interval >= 0 {
		interval = time.Duration(*start.Interval) * time.Second
	}
	fmt.Fprintf(msg, "To sign in to %s, open %s in a browser and enter the code %s\n", client.url, start.VerificationURI, start.UserCode)
	if start.Complete != "" {
		fmt.Fprintf(msg, "  (or open %s)\n", start.Complete)
	}
	if start.ExpiresIn > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(start.ExpiresIn)*time.Second)
		defer cancel()
	}
	form := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {start.DeviceCode}}
	for {
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return signedIn{}, errors.New("device sign-in: the code expired before it was approved; run tether login again")
			}
			return signedIn{}, ctx.Err()
		case <-t.C:
		}
		got, err := client.token(ctx, form)
		var te *tokenError
		switch {
		case err == nil:
			return got, nil
		case errors.As(err, &te) && te.Code == "authorization_pending":
		case errors.As(err, &te) && te.Code == "slow_down":
			interval += 5 * time.Second
		case errors.As(err, &te) && te.Code == "access_denied":
			return signedIn{}, errors.New("device sign-in: the code was refused on the hub's page")
		case errors.As(err, &te) && te.Code == "expired_token":
			return signedIn{}, errors.New("device sign-in: the code expired before it was approved; run tether login again")
		default:
			return signedIn{}, fmt.Errorf("device sign-in: %w", err)
		}
	}
}
