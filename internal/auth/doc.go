// Package auth says who a request to the hub is from. The hub acts as that person in each
// cluster (impersonation, SPEC section 3), so everything a person may do anywhere rests on this
// answer: it lives in one package, with its settings, its checks and its tests in one place,
// apart from the proxy that uses it.
//
// # Ways in
//
// Any of these may be configured; New builds an Authenticator over those that are.
//
//   - Static bearer tokens: a users list, TETHER_USERS (inline, YAML or its base64) or
//     TETHER_USERS_FILE (a path, reloaded when it changes; a bad reload keeps the last good
//     list and logs why). Source "token".
//   - OIDC ID tokens as bearer tokens: TETHER_OIDC_ISSUER, TETHER_OIDC_CLIENT_ID,
//     TETHER_OIDC_USERNAME_CLAIM (default email, which counts only with email_verified: true),
//     TETHER_OIDC_GROUPS_CLAIM (default groups; text or a list of texts), TETHER_OIDC_CA_FILE.
//     Source "oidc".
//   - Hub-issued tokens, the ones in the kubeconfigs the hub hands out (IssueToken). Source
//     "hub". Always on: with no TETHER_TOKEN_SIGNING_KEY_FILE the hub makes a key at start.
//   - An authenticating proxy's headers: TETHER_AUTH_PROXY_USER_HEADER and
//     TETHER_AUTH_PROXY_GROUPS_HEADER, from TCP peers in TETHER_AUTH_PROXY_TRUSTED_CIDRS only.
//     Source "proxy".
//
// Config.Configured reports whether any but hub-issued tokens is set; without one the hub
// refuses to start (ErrNothingConfigured), except under `tether dev`.
//
// # Order
//
// A request with "Authorization: Bearer <token>" is decided by its token alone, tried in this
// order:
//
//  1. the users list, by the token's SHA-256;
//  2. a hub-issued token: a JWT whose issuer is "tether-hub", checked against the hub's keys
//     only, never the OIDC issuer's;
//  3. an OIDC ID token: any other JWT, checked by go-oidc against the issuer's keys, issuer,
//     the client ID as audience, and expiry.
//
// A token that is none of these is an error, not "no credentials". A request without an
// Authorization header, or with another scheme such as Basic (which proxies like oauth2-proxy
// send of their own), is decided by the auth proxy's headers when its TCP peer is trusted.
//
// # The users list
//
//	# users.yaml
//	- name: alice@example.com    # unique; as Kubernetes will see it, before any prefix
//	  tokenSha256: 9f86d0…        # 64 hex; or a list of two while a token is rotated
//	  groups: [platform]          # optional
//	- name: ci
//	  token: <at least 32 characters>    # instead of tokenSha256; only its hash is kept
//	  limits: {watches: 1000}     # optional: requests, watches, sessions open at once per cluster
//
// It is parsed by the same code as the agents list (package listfile), so it takes the same forms
// and its errors read the same: TETHER_USERS[0] ("alice") needs a token of at least 32
// characters, or its tokenSha256. Two people with the same token, and names or groups that
// would start with "system:" once prefixed, are errors too, as are names and groups with
// control characters, spaces at either end, invisible formatting characters (zero-width,
// bidi) or a fullwidth colon, which read as other names in a log line. From an OIDC claim or
// the auth proxy's headers, such a name or group makes Authenticate fail with ErrIdentity,
// which the hub answers with 403.
//
// # Hub-issued tokens
//
// JWTs signed with Ed25519 (EdDSA): iss "tether-hub", aud the hub's TETHER_PUBLIC_URL, sub the
// person's name, a groups claim, a from claim (how the person signed in: token, oidc or proxy),
// and an expiry TETHER_KUBECONFIG_TTL (12h) after issue. A single hub signs and checks them on
// one clock, so they are taken up to their expiry and not a second later; Config.HubTokenLeeway
// (at most 5 s) is for replicas whose clocks disagree.
// TETHER_TOKEN_SIGNING_KEY_FILE holds one or more Ed25519 private keys in PEM (PKCS #8, as
// openssl genpkey -algorithm ed25519 writes); the first signs and all are accepted, so a key is
// rotated by putting a new one first and removing the old one a TTL later. Ed25519 rather than
// a shared HMAC secret so that the public half can be published later (JWKS) without letting
// anyone sign. A token issued to someone on the users list holds only while they are on it,
// with the groups the list gives them now: taking a person off the list revokes their
// kubeconfigs and page session at once. Tokens issued to people signed in through OIDC or the
// auth proxy can't be checked against a list, and are valid until they expire; replacing the
// key revokes every token at once.
//
// A page session's cookie holds a hub-issued token too (IssueSession), with a ses claim: when
// it was made. Signing out (EndSessions) voids every session made for that name before then, on
// this hub and, once told (OnSignOut, SignedOutElsewhere), on its other replicas, until they
// would have expired; kubeconfig tokens hold. A token made from another
// hub-issued token (a kubeconfig downloaded in a session, a session signed in with a
// kubeconfig's token) expires with it.
//
// # Secrets
//
// No token reaches a log or an error. Static tokens are kept as SHA-256 hashes only. The hub
// forwards a person's bearer token to forwardToken clusters only when it is an OIDC ID token
// (Person.Bearer): a static or hub-issued token is a key to the hub itself.
package auth
