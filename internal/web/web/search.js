// The fleet page's search over every cluster's inventory: /api/resources
// asked for NDJSON, read a line at a time from the response body, a row
// added for each object as its cluster's answer arrives. A row links to
// the object on its cluster's page (#open=…, which opens its conditions
// and events); a cluster left out is named with why.
"use strict";
(function () {
  const form = document.getElementById("search");
  if (!form) return;
  const base = document.getElementById("clusters").dataset.base;
  const status = document.getElementById("search-status");
  const table = document.getElementById("search-results");
  const body = table.querySelector("tbody");
  const leftOut = document.getElementById("search-left-out");
  // The kinds whose rows the cluster page opens, as its events API names them.
  const kinds = {
    nodes: "Node", pods: "Pod", deployments: "Deployment", statefulsets: "StatefulSet", daemonsets: "DaemonSet",
    jobs: "Job", cronjobs: "CronJob", rollouts: "Rollout", applications: "Application", gateways: "Gateway",
    virtualservices: "VirtualService", resourcequotas: "ResourceQuota", workflows: "Workflow",
    sparkapplications: "SparkApplication",
  };
  const MAX_ROWS = 500;
  let current = null; // the search under way, to abort when another starts

  function cell(label, ...content) {
    const td = document.createElement("td");
    td.dataset.label = label;
    td.append(...content);
    return td;
  }

  function addRow(it) {
    const tr = document.createElement("tr");
    const kind = kinds[it.kind];
    const name = document.createElement("a");
    name.textContent = it.name;
    name.href = base + "cluster/" + encodeURIComponent(it.cluster) +
      (kind ? "#open=" + encodeURIComponent((it.namespace || "") + "\n" + kind + "/" + it.name) : "");
    tr.append(cell("Cluster", it.cluster), cell("Namespace", it.namespace || "—"), cell("Name", name),
      cell("Ready", it.ready ? "✔ ready" : "✖ not ready"));
    body.append(tr);
  }

  async function search(ev) {
    ev.preventDefault();
    if (current) current.abort();
    const ctl = current = new AbortController();
    body.replaceChildren();
    leftOut.replaceChildren();
    table.hidden = true;
    const params = new URLSearchParams({ kind: form.kind.value });
    if (form.selector.value.trim()) params.set("labelSelector", form.selector.value.trim());
    if (form.ready.value) params.set("ready", form.ready.value);
    status.textContent = "Searching…";
    let rows = 0, clusters = 0;
    try {
      const r = await fetch(base + "api/resources?" + params, { headers: { Accept: "application/x-ndjson" }, signal: ctl.signal });
      if (!r.ok) throw new Error((await r.text()).trim() || r.statusText);
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let rest = "";
      const take = line => {
        if (!line.trim()) return;
        const l = JSON.parse(line);
        if (l.end) {
          clusters++;
          if (l.leftOut) {
            const li = document.createElement("li");
            li.textContent = l.cluster + ": " + l.leftOut;
            leftOut.append(li);
          }
        } else if (rows < MAX_ROWS) {
          addRow(l.item);
          rows++;
          table.hidden = false;
        } else rows++;
        status.textContent = "Searching… " + rows + " found in " + clusters + " cluster" + (clusters === 1 ? "" : "s") + " so far";
      };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        rest += decoder.decode(value, { stream: true });
        const lines = rest.split("\n");
        rest = lines.pop();
        lines.forEach(take);
      }
      take(rest + decoder.decode());
      status.textContent = rows === 0 ? "Nothing found." :
        rows + " found" + (rows > MAX_ROWS ? ", the first " + MAX_ROWS + " shown" : "") + ".";
    } catch (e) {
      if (e.name === "AbortError") return;
      status.textContent = "The search failed: " + e.message;
    }
  }
  form.addEventListener("submit", search);
})();
