package e2e

// People the hub in these tests knows: alice in group dev, admin in a group
// bound to cluster-admin.
const (
	aliceToken = "alice-e2e-token-0123456789abcdef0123456789"
	adminToken = "admin-e2e-token-0123456789abcdef0123456789"
	testUsers  = `
- name: alice
  token: ` + aliceToken + `
  groups: [dev]
- name: admin
  token: ` + adminToken + `
  groups: ["tether:admins"]
`
)
