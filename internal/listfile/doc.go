// Package listfile reads the hub's lists of named entries with tokens: the agents list
// (internal/fleet, TETHER_FLEET_AGENTS) and the users list (internal/auth, TETHER_USERS), and
// TETHER_FLEET_CLUSTERS, which has the same shape. It exists so that both lists take the same
// forms, word their errors the same way and reload the same way, without auth depending on the
// agents list to get that.
//
// It holds what the lists share and nothing about any one of them: ReadSource picks the inline
// value or the file (SETTING or SETTING_FILE); ParseList decodes YAML, or that YAML
// base64-encoded, and checks what every entry has (a mapping, known fields, a unique name),
// then hands each Entry to the list's own callback; Entry reads fields and words errors as
// "SETTING[i] ("name") …" (*ListError), never quoting a token; TokenHashes reads token or
// tokenSha256 and keeps only the Hash; WatchFile follows a file the way Kubernetes updates a
// mounted Secret.
package listfile
