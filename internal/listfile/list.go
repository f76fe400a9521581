package listfile

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// This file holds what every list of named entries with tokens shares (internal/fleet's agents
// list, internal/auth's users list of TETHER_USERS): where the text comes from, YAML or base64 of
// it, the checks every entry gets, and the wording of errors. The list-specific parts sit in a
// ParseList callback.

// Source is the text of a list and where it came from.
type Source struct {
	// Setting is what errors name: the setting itself (TETHER_FLEET_AGENTS) for inline text, the
	// setting with _FILE (TETHER_FLEET_AGENTS_FILE) for a file.
	Setting string
	// Path is the file the text came from, or "" for inline text.
	Path string
	Data []byte
}

// ReadSource picks where a list comes from: value is the setting's own value (the list inline),
// file the value of setting+"_FILE" (a path). An empty or blank value counts as unset, as Helm and
// shells often set variables to "". It reports false when neither is set, and an error when both
// are or the file can't be read.
func ReadSource(setting, value, file string) (Source, bool, error) {
	fileSetting := setting + "_FILE"
	hasValue, hasFile := strings.TrimSpace(value) != "", strings.TrimSpace(file) != ""
	switch {
	case hasValue && hasFile:
		return Source{}, false, &ListError{Setting: setting, Index: -1,
			msg: fmt.Sprintf("%s and %s are both set; set only one of them.", setting, fileSetting)}
	case hasValue:
		return Source{Setting: setting, Data: []byte(value)}, true, nil
	case hasFile:
		data, err := os.ReadFile(file)
		if err != nil {
			return Source{}, false, fmt.Errorf("%s can't be read: %w", fileSetting, err)
		}
		return Source{Setting: fileSetting, Path: file, Data: data}, true, nil
	}
	return Source{}, false, nil
}

// ListError is a problem with the content of a list. Its text is meant for people: it names the
// setting, the entry's index and name when it is about one entry, and says what to do. It never
// contains a token.
type ListError struct {
	Setting string
	Index   int    // the entry's index, or -1 when the error is about the whole list
	Name    string // the entry's name, when it has one
	msg     string
}

func (e *ListError) Error() string { return e.msg }

// ListSpec describes one kind of list for ParseList.
type ListSpec struct {
	// Setting names the list in errors, like TETHER_FLEET_AGENTS.
	Setting string
	// Fields are the fields an entry may have, in the order errors list them; "name" is always one.
	Fields []string
	// Example is a name for errors to show, like private-eu.
	Example string
}

// ParseList reads data as a YAML list of mappings, or as that YAML base64-encoded, and calls
// parse for each entry in order. Before parse sees an entry, ParseList has checked that it is a
// mapping, that it has only fields from spec.Fields, and that its name is text, not empty, and not
// the name of an earlier entry. It stops at the first error.
func ParseList(spec ListSpec, data []byte, parse func(e *Entry) error) error {
	items, err := decodeList(spec, data)
	if err != nil {
		return err
	}
	first := make(map[string]int, len(items))
	for i, raw := range items {
		e := &Entry{spec: &spec, index: i}
		if kind := kindOf(raw); raw[0] != '{' {
			return e.Errorf("must be a mapping of fields (name: …); it is %s.", kind)
		}
		if err := json.Unmarshal(raw, &e.fields); err != nil {
			return e.Errorf("can't be read: %v", err)
		}
		if s, ok := e.fields["name"]; ok && s[0] == '"' {
			_ = json.Unmarshal(s, &e.name) // labels the errors below; checked again right after
		}
		if err := e.checkFields(); err != nil {
			return err
		}
		name, ok, err := e.String("name")
		if err != nil && !isNull(e.fields["name"]) {
			return err
		}
		if !ok || name == "" {
			return e.Errorf("needs a name, like \"name: %s\".", spec.Example)
		}
		if j, dup := first[name]; dup {
			return e.Errorf("has the same name as %s[%d]; names must be unique.", spec.Setting, j)
		}
		first[name] = i
		if err := parse(e); err != nil {
			return err
		}
	}
	return nil
}

// decodeList turns the list's text into its items. Text that parses as a YAML list is YAML;
// anything else that looks like base64 is decoded and must then be a YAML list.
func decodeList(spec ListSpec, data []byte) ([]json.RawMessage, error) {
	listErr := func(format string, args ...any) error {
		return &ListError{Setting: spec.Setting, Index: -1, msg: spec.Setting + " " + fmt.Sprintf(format, args...)}
	}
	const want = "must be a YAML list of entries, each like \"- name: %s\", or that YAML base64-encoded; it is %s%s."
	items, kind, yamlErr := yamlList(data)
	if items != nil {
		return items, nil
	}
	if !looksBase64(data) {
		if yamlErr != nil {
			return nil, listErr("is not valid YAML%s.", yamlProblem(yamlErr))
		}
		return nil, listErr(want, spec.Example, "", kind)
	}
	text, err := decodeBase64(data)
	if err != nil {
		return nil, listErr("looks like base64 but doesn't decode (%v); give the YAML list itself, or its base64 on one line (base64 -w0).", err)
	}
	if !utf8.Valid(text) {
		return nil, listErr(want, spec.Example, "", "neither")
	}
	items, kind, yamlErr = yamlList(text)
	switch {
	case items != nil:
		return items, nil
	case yamlErr != nil:
		return nil, listErr("is base64 of text that is not valid YAML%s.", yamlProblem(yamlErr))
	}
	return nil, listErr(want, spec.Example, "base64 of ", kind)
}

// yamlList parses data strictly (a key twice in one mapping is an error) and returns its items if
// it is a list, or else what it is. Its error is the parser's, which may quote a value: show only
// yamlProblem of it.
func yamlList(data []byte) (items []json.RawMessage, kind string, err error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, "", err
	}
	if len(j) == 0 || j[0] != '[' {
		return nil, kindOf(j), nil
	}
	if err := json.Unmarshal(j, &items); err != nil {
		return nil, "", err
	}
	if items == nil {
		items = []json.RawMessage{} // "[]" is a list, with no entries
	}
	return items, "", nil
}

// yamlLine finds the line a YAML error is about, the one part of its text a list's error takes.
var yamlLine = regexp.MustCompile(`\bline ([0-9]+)\b`)

// yamlProblem says what a YAML error is about in Tether's own words, as " at line N: what": the
// line and the kind of problem, never the parser's text, which may quote a value, and values may be
// tokens. Matching the parser's wording only picks the hint; nothing it says reaches the error.
func yamlProblem(err error) string {
	msg := err.Error()
	where := ""
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		where = " at line " + m[1]
	}
	what := "check its indentation, its dashes and its quoting"
	switch {
	case strings.Contains(msg, "already set"):
		what = "a mapping has the same key twice"
	case strings.Contains(msg, "map key"):
		what = "a mapping has a key that is not text (a list, a mapping or empty)"
	case strings.Contains(msg, "cannot decode"), strings.Contains(msg, "cannot unmarshal"):
		what = "a value doesn't match its tag (like !!int)"
	}
	return where + ": " + what
}

// looksBase64 reports whether data holds only base64 characters (either alphabet, padding, and
// the line breaks some encoders insert): then its errors are about base64, not YAML.
func looksBase64(data []byte) bool {
	data = bytes.TrimSpace(data)
	for _, c := range data {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '+', c == '/', c == '-', c == '_', c == '=', c == '\r', c == '\n':
		default:
			return false
		}
	}
	return len(data) > 0
}

// decodeBase64 accepts the standard and the URL alphabet, padded or not, wrapped or not: people
// paste whatever their tool printed.
func decodeBase64(data []byte) ([]byte, error) {
	s := strings.Join(strings.Fields(string(data)), "")
	s = strings.TrimRight(s, "=")
	enc := base64.RawStdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.RawURLEncoding
	}
	return enc.DecodeString(s)
}

// kindOf names what a JSON value is, in the words of someone who wrote YAML.
func kindOf(raw []byte) string {
	if len(raw) == 0 {
		return "empty"
	}
	switch raw[0] {
	case '{':
		return "a mapping"
	case '[':
		return "a list"
	case '"':
		return "text"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "empty"
	}
	return "a number"
}

func isNull(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == 'n' }

// Entry is one entry of a list being parsed. Its methods read fields and word their errors the
// same way for every list.
type Entry struct {
	spec   *ListSpec
	index  int
	name   string
	fields map[string]json.RawMessage
}

// Index is the entry's position in the list, from 0.
func (e *Entry) Index() int { return e.index }

// Name is the entry's name.
func (e *Entry) Name() string { return e.name }

// Has reports whether the entry has field, even with no value.
func (e *Entry) Has(field string) bool { _, ok := e.fields[field]; return ok }

// IsNull reports whether the entry has field with no value ("groups:" with nothing after it).
func (e *Entry) IsNull(field string) bool { return isNull(e.fields[field]) }

// Errorf returns a *ListError about this entry: "SETTING[i] ("name") " followed by the message.
func (e *Entry) Errorf(format string, args ...any) error {
	prefix := fmt.Sprintf("%s[%d]", e.spec.Setting, e.index)
	if e.name != "" {
		prefix += fmt.Sprintf(" (%q)", e.name)
	}
	return &ListError{Setting: e.spec.Setting, Index: e.index, Name: e.name,
		msg: prefix + " " + fmt.Sprintf(format, args...)}
}

// EntryErrorf returns a *ListError about the entry at index, worded as Entry.Errorf words it,
// for a check a list makes after ParseList, across its entries.
func EntryErrorf(setting string, index int, name, format string, args ...any) error {
	e := &Entry{spec: &ListSpec{Setting: setting}, index: index, name: name}
	return e.Errorf(format, args...)
}

func (e *Entry) checkFields() error {
	var unknown []string
	for f := range e.fields {
		if !slices.Contains(e.spec.Fields, f) {
			unknown = append(unknown, f)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	hint := ""
	for _, f := range e.spec.Fields {
		if strings.EqualFold(f, unknown[0]) {
			hint = fmt.Sprintf(" (did you mean %q?)", f)
		}
	}
	fields := e.spec.Fields
	return e.Errorf("has an unknown field %q%s; the fields are %s and %s.",
		unknown[0], hint, strings.Join(fields[:len(fields)-1], ", "), fields[len(fields)-1])
}

// value returns a field's raw value, and an error if it is there with no value.
func (e *Entry) value(field string) (json.RawMessage, bool, error) {
	raw, ok := e.fields[field]
	if !ok {
		return nil, false, nil
	}
	if isNull(raw) {
		return nil, false, e.Errorf("has no value for %s; give it one, or leave it out.", field)
	}
	return raw, true, nil
}

// text reads a JSON string; what names the value in the error ("a name", "a label \"tier\"").
// Its error never shows the value, which may be a token.
func (e *Entry) text(raw json.RawMessage, what string) (string, error) {
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '{', '[':
		return "", e.Errorf("needs %s as text; it is %s.", what, kindOf(raw))
	}
	return "", e.Errorf("has %s that YAML reads as %s, not text; put it in quotes.", what, kindOf(raw))
}

// String reads a text field. It reports false when the field is absent.
func (e *Entry) String(field string) (string, bool, error) {
	raw, ok, err := e.value(field)
	if !ok {
		return "", false, err
	}
	s, err := e.text(raw, "a "+field)
	return s, err == nil, err
}

// Bool reads a true-or-false field. It reports false when the field is absent.
func (e *Entry) Bool(field string) (v, ok bool, err error) {
	raw, ok, err := e.value(field)
	if !ok {
		return false, false, err
	}
	if raw[0] != 't' && raw[0] != 'f' {
		return false, false, e.Errorf("needs %s to be true or false; it is %s.", field, kindOf(raw))
	}
	return raw[0] == 't', true, nil
}

// Strings reads a list of non-empty texts. It reports false when the field is absent, and a
// non-nil empty slice for "[]".
func (e *Entry) Strings(field string) ([]string, bool, error) {
	raw, ok, err := e.value(field)
	if !ok {
		return nil, false, err
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, false, e.Errorf("needs %s to be a list; it is %s.", field, kindOf(raw))
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		s, err := e.text(item, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, false, err
		}
		if s == "" {
			return nil, false, e.Errorf("has an empty %s[%d]; remove it.", field, i)
		}
		out = append(out, s)
	}
	return out, true, nil
}

// StringMap reads a mapping of texts to texts. It reports false when the field is absent.
func (e *Entry) StringMap(field string) (map[string]string, bool, error) {
	raw, ok, err := e.value(field)
	if !ok {
		return nil, false, err
	}
	var items map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &items) != nil {
		return nil, false, e.Errorf("needs %s to be a mapping of names to text; it is %s.", field, kindOf(raw))
	}
	out := make(map[string]string, len(items))
	for _, k := range slices.Sorted(maps.Keys(items)) {
		s, err := e.text(items[k], fmt.Sprintf("%s[%q]", field, k))
		if err != nil {
			return nil, false, err
		}
		out[k] = s
	}
	return out, true, nil
}

// Counts reads a mapping of some of keys to whole numbers of at least 1, like
// limits: {watches: 1000}. It reports false when the field is absent. A key not in keys is an
// error, as an unknown field is: a misspelt limit must not silently leave the default in force.
func (e *Entry) Counts(field string, keys []string) (map[string]int, bool, error) {
	raw, ok, err := e.value(field)
	if !ok {
		return nil, false, err
	}
	var items map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &items) != nil {
		return nil, false, e.Errorf("needs %s to be a mapping of %s to numbers; it is %s.", field, strings.Join(keys, ", "), kindOf(raw))
	}
	out := make(map[string]int, len(items))
	for _, k := range slices.Sorted(maps.Keys(items)) {
		if !slices.Contains(keys, k) {
			return nil, false, e.Errorf("has an unknown %s %q; they are %s.", field, k, strings.Join(keys, ", "))
		}
		var n int
		if err := json.Unmarshal(items[k], &n); err != nil || n < 1 || n > maxCount {
			return nil, false, e.Errorf("needs %s.%s to be a whole number from 1 to %d; it is %s.", field, k, maxCount, kindOf(items[k]))
		}
		out[k] = n
	}
	return out, true, nil
}

// maxCount bounds what Counts reads: past it a limit is no limit, and int stays far from
// overflowing when counts are added up.
const maxCount = 1_000_000

// SHA256 reads a field of 64 hex characters, like caSha256; how says how to make one.
func (e *Entry) SHA256(field, how string) (Hash, bool, error) {
	s, ok, err := e.String(field)
	if !ok {
		return Hash{}, false, err
	}
	h, err := ParseHash(s)
	if err != nil {
		return Hash{}, false, e.badHash(field, s, how)
	}
	return h, true, nil
}

// badHash says what is wrong with s, a malformed hash in field. Hashes are not secrets, so one
// is quoted, except in a tokenSha256: what is there may be the token itself, pasted into the
// wrong field, and no token is ever quoted.
func (e *Entry) badHash(field, s, how string) error {
	if !strings.HasPrefix(field, "tokenSha256") {
		return e.Errorf("has a %s of %q, which is not 64 hex characters; %s", field, s, how)
	}
	notHex := 0
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			notHex++
		}
	}
	return e.Errorf("has a %s that is not 64 hex characters: it has %d, %d of them not hex digits (not quoted, as it may be the token itself: that goes in token); %s",
		field, utf8.RuneCountInString(s), notHex, how)
}

const howTokenSHA256 = `make it with: printf %s "$TOKEN" | sha256sum`

// TokenHashes reads the entry's credential: tokenSha256 (one hash, or a list of one or two while
// a token is rotated) or token (at least MinTokenLength characters; spaces around it are ignored,
// as the agent ignores them around its own). Only the token's hash is kept.
func (e *Entry) TokenHashes() ([]Hash, error) {
	switch {
	case e.Has("token") && e.Has("tokenSha256"):
		return nil, e.Errorf("has both a token and a tokenSha256; keep only one (tokenSha256 keeps the token itself out of the hub's settings).")
	case e.Has("token"):
		tok, _, err := e.String("token")
		if err != nil {
			return nil, err
		}
		tok = strings.TrimSpace(tok)
		// SPEC's line exactly, short or missing: tools match it.
		if utf8.RuneCountInString(tok) < MinTokenLength {
			return nil, e.Errorf("needs a token of at least %d characters, or its tokenSha256.", MinTokenLength)
		}
		return []Hash{HashToken(tok)}, nil
	case !e.Has("tokenSha256"):
		return nil, e.Errorf("needs a token of at least %d characters, or its tokenSha256.", MinTokenLength)
	}
	raw, _, err := e.value("tokenSha256")
	if err != nil {
		return nil, err
	}
	if raw[0] != '[' {
		h, _, err := e.SHA256("tokenSha256", howTokenSHA256)
		return []Hash{h}, err
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, e.Errorf("can't be read: %v", err)
	}
	if len(items) == 0 || len(items) > 2 {
		return nil, e.Errorf("has %d tokenSha256 values; give one, or two while a token is being rotated.", len(items))
	}
	var hashes []Hash
	for i, item := range items {
		s, err := e.text(item, fmt.Sprintf("a tokenSha256[%d]", i))
		if err != nil {
			return nil, err
		}
		h, err := ParseHash(s)
		if err != nil {
			return nil, e.badHash("tokenSha256", s, howTokenSHA256)
		}
		if !slices.Contains(hashes, h) {
			hashes = append(hashes, h)
		}
	}
	return hashes, nil
}
