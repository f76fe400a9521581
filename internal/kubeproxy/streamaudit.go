package kubeproxy

import (
	"iter"
	"net/url"
	"strings"
)

// setStream fills in what an exec, attach or port-forward request asks the
// kubelet to do, so its audit line says which command ran in which
// container, not only that a pod's exec was opened (issue 37). path is the
// request's path after the cluster's prefix, rawQuery its query, which the
// hub sends the API server as it came; for any other request it does
// nothing.
//
// The fields are read from the query as the API server reads it (a bool is
// false only when absent, "0" or "false"), so the line records what the
// cluster was asked; a command can hold a secret the person typed (sh -c
// 'TOKEN=…'), and auditors want that too. kubectl port-forward names its
// ports inside the stream, in each stream's headers, where the hub doesn't
// look: its lines carry ports only when the query has them, as other
// clients send them.
func (rec *AuditRecord) setStream(path, rawQuery string) {
	// The cheap test first: this runs on every request.
	slash := strings.LastIndexByte(path, '/')
	if slash < 0 {
		return
	}
	sub := path[slash+1:]
	if sub != "exec" && sub != "attach" && sub != "portforward" {
		return
	}
	rest, ok := strings.CutPrefix(path[:slash], "/api/v1/namespaces/")
	if !ok {
		return
	}
	// ns/pods/pod, each one segment.
	ns, rest, ok := strings.Cut(rest, "/")
	if !ok || ns == "" {
		return
	}
	pod, ok := strings.CutPrefix(rest, "pods/")
	if !ok || pod == "" || strings.Contains(pod, "/") {
		return
	}
	rec.Pod = pod
	var tty, stdin []string // the first value of each is the one read
	var command, ports capped
	for k, v := range queryPairs(rawQuery) {
		switch {
		case k == "ports" && sub == "portforward":
			ports.add(v, maxAuditPorts)
		case sub == "portforward":
		case k == "command" && sub == "exec":
			command.add(v, maxAuditCommand)
		case k == "container" && rec.Container == "":
			rec.Container = v
		case k == "tty" && tty == nil:
			tty = []string{v}
		case k == "stdin" && stdin == nil:
			stdin = []string{v}
		}
	}
	rec.Command, rec.commandMore = command.list, command.more
	rec.Ports, rec.portsMore = ports.list, ports.more
	if sub != "portforward" {
		t, s := queryBool(tty), queryBool(stdin)
		rec.TTY, rec.Stdin = &t, &s
	}
}

// capped gathers a list from a query, keeping entries only until it holds
// more than bound keeps of a list of max bytes, and counting the rest:
// a megabyte of "command=&" is 116,000 arguments, of which a line keeps
// 8,192, and the hub needn't hold the others to say how many there were.
type capped struct {
	list       []string
	cost, more int
}

func (c *capped) add(v string, max int) {
	if c.cost > max {
		c.more++
		return
	}
	c.list = append(c.list, v)
	// What v costs once bound cuts it, exactly as bound counts it: the
	// list c keeps is then always cut by bound, which adds c.more to how
	// many it left out. (An estimate of min(len(v), a field) kept too few
	// of long arguments whose cut drops invalid UTF-8: FuzzStreamAudit.)
	c.cost += len(cutField(v, maxAuditField)) + 1
}

// queryPairs yields a query's keys and values, unescaped, as
// url.ParseQuery reads them (and the API server): a pair with a semicolon
// or a bad escape is left out. Unlike url.ParseQuery it reads a query of
// any number of pairs, where Go 1.26 refuses one of more than 10,000
// whole: an API server built with an older Go reads them all, and the
// audit line must not then say no command ran.
func queryPairs(rawQuery string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for rawQuery != "" {
			var pair string
			pair, rawQuery, _ = strings.Cut(rawQuery, "&")
			if pair == "" || strings.Contains(pair, ";") {
				continue
			}
			k, v, _ := strings.Cut(pair, "=")
			k, err := url.QueryUnescape(k)
			if err != nil {
				continue
			}
			v, err = url.QueryUnescape(v)
			if err != nil {
				continue
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// queryBool reads a bool from a query's values as Kubernetes does
// (runtime.Convert_Slice_string_To_bool): false when there is none or the
// first is "0" or "false" in any case, true otherwise, "" too.
func queryBool(values []string) bool {
	return len(values) > 0 && values[0] != "0" && !strings.EqualFold(values[0], "false")
}
