// Package fleet holds the hub's agents list: which clusters' agents may connect, with which
// tokens, and who may see each cluster. It parses and checks the list, keeps the one in force
// behind a holder that authenticates agents in constant time, and reloads it when its file
// changes, so adding or removing a cluster or rotating a token needs no hub restart. It also makes
// the tokens and list entries that `tether token` prints.
//
// # Where the list comes from
//
// TETHER_FLEET_AGENTS holds the list inline: YAML, or that YAML base64-encoded (standard or URL
// alphabet, padded or not, line breaks ignored). Text that parses as a YAML list is YAML; anything
// else is decoded as base64. TETHER_FLEET_AGENTS_FILE names a file holding the same. Both set is
// an error; neither means the hub has no agents list (Load returns a nil *Agents), and it refuses
// agents with 403.
//
// # The list
//
//	# agents.yaml
//	- name: private-eu          # unique; a DNS label, at most 63 characters
//	  tokenSha256: 9f86d0…       # 64 hex; or a list of one or two, to rotate a token
//	  labels: {region: eu}
//	  groups: [platform]         # absent: everyone signed in; []: no one
//	  forwardToken: false
//	  caSha256: 3a7bd3…          # optional: SHA-256 of the PEM bytes of the agent's ca.crt
//	- name: lab
//	  token: <at least 32 characters>   # instead of tokenSha256; only its hash is kept
//
// A token's SHA-256 is that of its text exactly as written, as printf %s "$TOKEN" | sha256sum
// prints it; upper-case hex is accepted. Unknown fields, a key given twice, and a field with no
// value are errors: a typo must not quietly widen who may see a cluster.
//
// # Errors
//
// Errors are meant to be read by the person who wrote the list: each names the setting, the
// entry's index and name, and what to do, like
//
//	TETHER_FLEET_AGENTS[0] ("private-eu") needs a token of at least 32 characters, or its tokenSha256.
//
// For a file, the setting named is TETHER_FLEET_AGENTS_FILE, without the path: the path is in
// the setting, and reload logs carry it as "file". No error contains a token's text.
//
// # Clusters the hub reaches itself
//
// TETHER_FLEET_CLUSTERS (ParseClusters) lists clusters with no agent in them: name, server,
// caFile, tokenFile, and labels, groups and forwardToken as above. The hub serves each with an
// agent of its own, whose entry, with a token made at start, joins the agents list through
// Config.Extra at start and on every reload.
//
// # Shared with the users list
//
// The users list (TETHER_USERS, TETHER_USERS_FILE) has the same shape, so what isn't about agents
// lives in internal/listfile, which both this package and internal/auth use: where the text
// comes from, YAML or base64, the checks every entry shares, token hashes, and watching the file.
package fleet
