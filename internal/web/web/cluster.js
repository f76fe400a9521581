// The cluster page: the cluster's inventory, fetched from the resources API
// (so the person's RBAC applies), shown in bounded tables, and fetched again
// when /api/events says the inventory changed. Everything from the cluster
// goes into the page as text, never as HTML.
"use strict";
(function () {
  const main = document.getElementById("cluster");
  const base = main.dataset.base;
  const name = main.dataset.name;
  const api = base + "api/clusters/" + encodeURIComponent(name);

  // PAGE is how many rows a table shows, and how many more each "Show more"
  // adds: a cluster may have 10,000 pods not ready, and a page that draws
  // them all is a page nobody can use.
  const PAGE = 200;
  // Loads of the inventory are at least MIN_GAP ms apart, and at least twice
  // as far apart as the last one took, so a busy cluster doesn't turn the
  // page into a stream of requests. Events within DEBOUNCE ms make one load.
  const MIN_GAP = 1000;
  const DEBOUNCE = 250;
  // A load that failed (the hub didn't answer, or couldn't check access) is
  // tried again after RETRY ms, as no event may come to prompt it.
  const RETRY = 5000;

  // The queries the page makes, one per kind.
  const queries = [
    { kind: "nodes", params: "" },
    { kind: "deployments", params: "" },
    { kind: "statefulsets", params: "" },
    { kind: "daemonsets", params: "" },
    { kind: "jobs", params: "" },
    { kind: "cronjobs", params: "" },
    { kind: "pods", params: "&ready=false" },
    { kind: "applications", params: "" },
    { kind: "gateways", params: "" },
    { kind: "rollouts", params: "" },
    { kind: "workflows", params: "&ready=false" },
    { kind: "sparkapplications", params: "&ready=false" },
    { kind: "virtualservices", params: "" },
    { kind: "resourcequotas", params: "" },
    // Warning events, shown beside the objects they are about.
    { kind: "events", params: "" },
  ];
  const workloadKinds = { deployments: "Deployment", statefulsets: "StatefulSet", daemonsets: "DaemonSet", jobs: "Job", cronjobs: "CronJob", rollouts: "Rollout" };
  const runKinds = { workflows: "Workflow", sparkapplications: "SparkApplication" };
  // What people call a kind the cluster doesn't serve.
  const missingText = {
    applications: "Argo CD isn't installed", gateways: "Istio isn't installed", virtualservices: "Istio isn't installed",
    rollouts: "Argo Rollouts isn't installed", workflows: "Argo Workflows isn't installed",
    sparkapplications: "the Spark operator isn't installed",
  };
  // WARNINGS is how many of an object's warnings its row shows: the hub
  // keeps the last of each reason, and the newest say the most.
  const WARNINGS = 3;

  const namespace = document.getElementById("namespace");
  const errorLine = document.getElementById("error");
  let lists = {};        // kind → the items last fetched
  let domains = [];      // the cluster's domains last fetched
  let warnings = new Map(); // "namespace\nKind/name" and "\nKind/name" → its warning events, newest first
  let missing = new Set(); // kinds the cluster doesn't serve
  let unwatched = new Set(); // kinds Tether can't watch, in some namespace or all
  let haveInventory = false; // the cluster has sent one
  let loaded = false;      // lists hold an answer for the inventory there is
  let lastKey = null;    // the inventory's "updated" the last load fetched
  let latestKey = null;  // the newest the page has heard of
  let heard = 0;         // the cluster's events so far
  // The status line as last shown: when it changes, the history has a new
  // row, which a load fetches.
  let shownStatus = document.querySelector("#status .text").textContent;
  const limit = {};      // section id → rows shown
  // The kind, for the events API's object=Kind/name, of each section's rows.
  const objectKind = {
    nodes: () => "Node", workloads: r => workloadKinds[r.kind], pods: () => "Pod", applications: () => "Application",
    gateways: () => "Gateway", runs: r => runKinds[r.kind], virtualservices: () => "VirtualService", quotas: () => "ResourceQuota",
  };
  let opened = null; // the open row's "namespace\nKind/name"
  // A link to an object (the fleet search's) opens it: #open=<its key>.
  if (location.hash.startsWith("#open=")) opened = decodeURIComponent(location.hash.slice(6));
  const details = window.tetherDetails(api, key => { if (opened === key) renderInventory(); });

  // ---- loading, debounced ----
  let timer = null, inflight = false, again = false, lastStart = 0, lastTook = 0;

  function schedule(atLeast = 0) {
    if (inflight) {
      again = true;
      return;
    }
    if (timer !== null) return;
    const gap = Math.max(MIN_GAP, 2 * lastTook);
    const wait = Math.max(DEBOUNCE, atLeast, lastStart + gap - Date.now());
    timer = setTimeout(() => {
      timer = null;
      if (document.hidden) {
        again = true; // load when the page is seen again
        return;
      }
      load();
    }, wait);
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && again && !inflight) {
      again = false;
      schedule();
    }
  });

  class HubError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function getJSON(url) {
    const r = await fetch(url, { headers: { Accept: "application/json" } });
    if (!r.ok) throw new HubError(r.status, (await r.text()).trim() || r.statusText);
    return r.json();
  }

  async function load() {
    inflight = true;
    lastStart = Date.now();
    let failed = false;
    try {
      const before = heard;
      const c = await getJSON(api);
      // An event that came while the answer was on its way may be newer
      // than it: what it showed is drawn over now, so load again after.
      if (heard !== before) again = true;
      renderCluster(c);
      renderHistory(c.history || []);
      lastKey = latestKey = inventoryKey(c);
      if (!c.inventory) {
        lists = {};
        loaded = false;
        renderInventory();
        return;
      }
      const wanted = queries.filter(q => !missing.has(q.kind));
      const [results, gotDomains] = await Promise.all([
        Promise.all(wanted.map(q => getJSON(api + "/resources?kind=" + encodeURIComponent(q.kind) + q.params))),
        missing.has("gateways") ? [] : getJSON(api + "/domains"),
      ]);
      lists = {};
      wanted.forEach((q, i) => { lists[q.kind] = results[i].sort(byName); });
      domains = gotDomains;
      warnings = indexWarnings(lists.events || []);
      // An open row's events may have changed too; others are fetched anew when opened.
      details.forgetBut(opened);
      if (opened) details.fetch(opened);
      loaded = true;
      renderInventory();
      errorLine.hidden = true;
    } catch (e) {
      errorLine.textContent = e instanceof HubError ? e.message : "Tether's hub can't be reached: " + e.message;
      errorLine.hidden = false;
      if (e instanceof HubError && e.status === 404) {
        // Gone from the agents list, or no longer this person's to see:
        // nothing shown before still holds. An event brings it back.
        lists = {};
        domains = [];
        warnings = new Map();
        loaded = haveInventory = false;
        lastKey = latestKey = null;
        document.querySelector("#status .icon").textContent = "✖";
        document.querySelector("#status .text").textContent = shownStatus = "Not in the fleet";
        document.getElementById("updated").textContent = "";
        document.getElementById("problems").replaceChildren();
        document.getElementById("missing").hidden = true;
      } else {
        failed = true;
      }
      renderInventory(); // says what isn't known, not "none"
    } finally {
      inflight = false;
      lastTook = Date.now() - lastStart;
      if (again || failed || latestKey !== lastKey) {
        again = false;
        schedule(failed ? RETRY : 0);
      }
    }
  }

  // ---- the cluster's status and inventory state ----
  function inventoryKey(c) {
    return c.inventory ? c.inventory.updated : "";
  }

  function statusText(c) {
    return c.status + (c.message ? ": " + c.message : "");
  }

  function renderCluster(c) {
    window.tetherTimeline(document.getElementById("timeline"), c.timeline);
    document.querySelector("#status .icon").textContent = c.status === "Ready" ? "✔" : "✖";
    document.querySelector("#status .text").textContent = shownStatus = statusText(c);
    const labels = document.getElementById("labels");
    labels.textContent = Object.keys(c.labels || {}).sort().map(k => k + "=" + c.labels[k]).join(" ");
    // No labels, no row: an empty "Labels" reads as a value that failed to load.
    labels.hidden = document.getElementById("labels-term").hidden = labels.textContent === "";
    document.getElementById("k8s").textContent = c.kubernetesVersion || "";
    document.getElementById("agent").textContent = c.agentVersion || "";
    document.getElementById("since").replaceChildren(window.tetherTimeElement(c.connectedSince));

    const inv = c.inventory;
    const updated = document.getElementById("updated");
    updated.replaceChildren();
    if (!inv) {
      updated.textContent = "Waiting for the cluster's inventory…";
    } else {
      updated.append("Inventory updated ", window.tetherTimeElement(inv.updated));
      // Its agent away, the cluster sends nothing new: say the tables may
      // be old, rather than let them pass for the state now.
      if (c.status !== "Ready") updated.append(" (what the cluster last sent: it is " + c.status + " now)");
    }

    const problems = document.getElementById("problems");
    const items = [];
    if (inv && inv.tooLarge) {
      items.push(warning(inv.tooLarge));
    } else if (inv && inv.truncated) {
      items.push(warning("The cluster has more than the hub keeps of one cluster (a million objects, or 256 MiB of them): some are left out here."));
    }
    haveInventory = !!inv;
    missing = new Set();
    unwatched = new Set();
    // One line per reason: when the agent can't reach its API server,
    // every kind has the same one.
    const byError = new Map();
    for (const p of (inv && inv.problems) || []) {
      if (p.missing) {
        missing.add(p.kind);
        continue;
      }
      unwatched.add(p.kind);
      const where = p.namespace ? " in " + p.namespace : "";
      const key = where + "\n" + p.error;
      if (!byError.has(key)) byError.set(key, { where, error: p.error, kinds: [] });
      byError.get(key).kinds.push(p.kind);
    }
    for (const { where, error, kinds } of byError.values()) {
      const li = warning("Tether can't watch " + kinds.join(", ") + where + ": " + error);
      items.push(li);
    }
    problems.replaceChildren(...items);
    const notes = Array.from(new Set(Array.from(missing).sort().map(k => missingText[k] || "The cluster doesn't serve " + k)));
    const missingLine = document.getElementById("missing");
    missingLine.textContent = notes.length ? "Not watched: " + notes.join("; ") + "." : "";
    missingLine.hidden = notes.length === 0;
  }

  // renderHistory fills the status history (newest first, as the hub
  // sends it), its times written as the page first showed them.
  function renderHistory(history) {
    const rows = history.map(h => {
      const tr = document.createElement("tr");
      tr.append(cell("Since", window.tetherTimeElement(h.time)), cell("Status", h.status));
      return tr;
    });
    document.querySelector("#history tbody").replaceChildren(...rows);
  }

  function warning(text) {
    const li = document.createElement("li");
    const icon = document.createElement("span");
    icon.className = "icon";
    icon.setAttribute("aria-hidden", "true");
    icon.textContent = "⚠";
    li.append(icon, " " + text);
    return li;
  }

  // ---- tables ----
  function cell(label, text, icon) {
    const td = document.createElement("td");
    td.dataset.label = label;
    if (icon) {
      const span = document.createElement("span");
      span.className = "icon";
      span.setAttribute("aria-hidden", "true");
      span.textContent = icon;
      td.append(span, " ");
    }
    td.append(text);
    return td;
  }

  // unknownWhy says why an empty list of kinds would not mean there are
  // none ("" when it would): nothing loaded yet, or a kind Tether can't
  // watch. A page must never show "✔ every pod is ready" for want of data.
  function unknownWhy(kinds) {
    if (!haveInventory) return "Not known yet: the cluster has sent no inventory.";
    if (!loaded) return "Not known: the hub didn't answer (above).";
    const bad = kinds.filter(k => unwatched.has(k));
    return bad.length ? "Not known: Tether can't watch " + bad.join(", ") + " (above)." : "";
  }

  // renderSection fills section id with rows (already in their order), at
  // most limit[id] of those in the chosen namespace; kinds are the kinds
  // the rows are of.
  function renderSection(id, rows, cells, namespaced, kinds) {
    const section = document.getElementById(id);
    const why = rows.length ? "" : unknownWhy(kinds);
    const unknown = section.querySelector(".unknown");
    unknown.textContent = why;
    unknown.hidden = !why;
    const ns = namespace.value;
    const filtered = ns && namespaced ? rows.filter(r => r.namespace === ns) : rows;
    const n = limit[id] || PAGE;
    section.querySelector(".count").textContent = why ? "" :
      "(" + (filtered.length === rows.length ? rows.length : filtered.length + " of " + rows.length) + ")";
    const body = document.createDocumentFragment();
    for (const r of filtered.slice(0, n)) {
      const tr = document.createElement("tr");
      tr.dataset.namespace = r.namespace || "";
      tr.dataset.name = r.name;
      const tds = cells(r);
      tr.append(...tds);
      body.append(tr);
      const kind = objectKind[id] && objectKind[id](r);
      if (kind) {
        // A row opens the object's details: its conditions and events.
        const key = (r.namespace || "") + "\n" + kind + "/" + r.name;
        tr.className = "object";
        tr.tabIndex = 0;
        tr.dataset.key = key;
        tr.setAttribute("aria-expanded", String(opened === key));
        if (opened === key) body.append(details.row(r, key, tds.length));
      }
    }
    section.querySelector("tbody").replaceChildren(body);
    section.querySelector("table").hidden = filtered.length === 0;
    section.querySelector(".empty").hidden = rows.length > 0 || !!why;
    section.querySelector(".none-here").hidden = filtered.length > 0 || rows.length === 0;
    const more = section.querySelector(".more");
    more.hidden = filtered.length <= n;
    more.querySelector(".text").textContent = "and " + (filtered.length - n) + " more" + (ns ? "" : " (choose a namespace to narrow the list)");
  }

  const ok = (good, text) => [good ? "✔" : "✖", text];

  // indexWarnings files warning events by the object they are about, the
  // latest of each reason, newest first, as the hub's /events answers.
  function indexWarnings(events) {
    const latest = new Map();
    for (const e of events) {
      if (!e.object) continue;
      for (const key of [(e.namespace || "") + "\n" + e.object, "\n" + e.object]) {
        if (!latest.has(key)) latest.set(key, new Map());
        const old = latest.get(key).get(e.reason);
        if (!old || (old.lastSeen || "") < (e.lastSeen || "")) latest.get(key).set(e.reason, e);
      }
    }
    const out = new Map();
    for (const [key, byReason] of latest) {
      out.set(key, Array.from(byReason.values()).sort((a, b) => (b.lastSeen || "").localeCompare(a.lastSeen || "")));
    }
    return out;
  }

  // withWarnings adds to td, an object's status, the warnings about it
  // (object is "Kind/name"; namespace is "" for a cluster-scoped object,
  // whose events Kubernetes files in any namespace), a line each.
  function withWarnings(td, namespace, object) {
    const list = warnings.get((namespace || "") + "\n" + object) || [];
    for (const e of list.slice(0, WARNINGS)) {
      const line = document.createElement("div");
      line.className = "warning";
      const icon = document.createElement("span");
      icon.className = "icon";
      icon.setAttribute("aria-hidden", "true");
      icon.textContent = "⚠";
      const t = window.tetherTimeElement(e.lastSeen);
      line.append(icon, " " + e.reason + (e.count > 1 ? " ×" + e.count : "") + (e.lastSeen ? ", last " : ""), t,
        e.message ? ": " + e.message : "");
      td.append(line);
    }
    if (list.length > WARNINGS) {
      const more = document.createElement("div");
      more.className = "warning";
      more.textContent = "and " + (list.length - WARNINGS) + " more warnings";
      td.append(more);
    }
    return td;
  }

  function statusCell(label, [icon, text]) {
    return cell(label, text, icon);
  }

  // reasons lists why an object isn't well: its abnormal conditions (the
  // agent sends only those), by reason.
  function reasons(r) {
    const out = [];
    for (const c of r.conditions || []) {
      const why = c.reason || c.type;
      if (why && !out.includes(why)) out.push(why);
    }
    return out.length ? " · " + out.slice(0, 3).join(", ") : "";
  }

  function workloadStatus(r) {
    switch (r.kind) {
      case "jobs":
        return [r.phase === "Complete" ? "✔" : r.ready ? "⟳" : "✖", r.phase || "Running"];
      case "cronjobs":
        return r.phase === "Suspended" ? ["⏸", "Suspended"] : ["✔", "Scheduled"];
    }
    return ok(r.ready, r.ready ? "Ready" : "Not ready");
  }

  function appStatus(value, good, bad) {
    if (!value) return ["?", "Unknown"];
    if (value === good) return ["✔", value];
    if (bad.includes(value)) return ["✖", value];
    return ["⟳", value];
  }

  // Names compare as people read them: web-2 before web-10.
  const natural = new Intl.Collator(undefined, { numeric: true }).compare;

  function byName(a, b) {
    return natural(a.namespace || "", b.namespace || "") || natural(a.name, b.name) || natural(a.kind, b.kind);
  }

  function byReadyThenName(a, b) {
    if (a.ready !== b.ready) return a.ready ? 1 : -1;
    return byName(a, b);
  }

  function renderInventory() {
    // Namespaces with anything in them, for the filter.
    const seen = new Set();
    for (const [kind, items] of Object.entries(lists)) {
      if (kind === "nodes" || kind === "events") continue;
      for (const r of items) if (r.namespace) seen.add(r.namespace);
    }
    if (namespace.value) seen.add(namespace.value);
    // Rebuilt only when the namespaces change: rebuilding closes the menu
    // under someone choosing from it.
    const names = Array.from(seen).sort(natural);
    if (names.join("\n") !== Array.from(namespace.options).slice(1).map(o => o.value).join("\n")) {
      const chosen = namespace.value;
      namespace.replaceChildren(new Option("All namespaces", ""), ...names.map(ns => new Option(ns, ns)));
      namespace.value = chosen;
    }

    renderSection("nodes", lists.nodes || [], r => [
      cell("Name", r.name),
      withWarnings(statusCell("Status", ok(r.ready, (r.ready ? "Ready" : "Not ready") + reasons(r))), "", "Node/" + r.name),
      cell("Version", r.version || "—"),
    ], false, ["nodes"]);

    const workloads = [];
    for (const k of Object.keys(workloadKinds)) workloads.push(...(lists[k] || []));
    workloads.sort(byReadyThenName);
    renderSection("workloads", workloads, r => [
      cell("Kind", workloadKinds[r.kind]),
      cell("Namespace", r.namespace),
      cell("Name", r.name),
      withWarnings(statusCell("Status", workloadStatus(r)), r.namespace, workloadKinds[r.kind] + "/" + r.name),
      cell("Ready", r.replicas || "—"),
    ], true, Object.keys(workloadKinds));

    renderSection("pods", lists.pods || [], r => [
      cell("Namespace", r.namespace),
      cell("Name", r.name),
      withWarnings(cell("Status", (r.phase || "Unknown") + reasons(r), "✖"), r.namespace, "Pod/" + r.name),
      cell("Restarts", String(r.restarts || 0)),
    ], true, ["pods"]);

    renderSection("applications", lists.applications || [], r => [
      cell("Namespace", r.namespace),
      cell("Name", r.name),
      statusCell("Sync", appStatus(r.sync, "Synced", ["OutOfSync"])),
      statusCell("Health", appStatus(r.health, "Healthy", ["Degraded", "Missing"])),
    ], true, ["applications"]);

    renderSection("gateways", lists.gateways || [], r => [
      cell("Namespace", r.namespace),
      cell("Name", r.name),
      cell("Hosts", (r.hosts || []).join(", ") || "—"),
    ], true, ["gateways"]);

    const runs = [];
    for (const k of Object.keys(runKinds)) runs.push(...(lists[k] || []));
    runs.sort(byName);
    renderSection("runs", runs, r => [
      cell("Kind", runKinds[r.kind]),
      cell("Namespace", r.namespace),
      cell("Name", r.name),
      cell("Phase", r.phase || "Unknown", "✖"),
      cell("Message", r.message || "—"),
    ], true, Object.keys(runKinds));

    renderSection("virtualservices", lists.virtualservices || [], r => [
      cell("Namespace", r.namespace),
      cell("Name", r.name),
      cell("Hosts", (r.hosts || []).join(", ") || "—"),
      cell("Gateways", (r.gateways || []).join(", ") || "—"),
    ], true, ["virtualservices"]);

    renderSection("domains", domains.map(d => ({ ...d, name: d.host })), d => [
      cell("Host", d.host),
      d.gateway ? cell("Gateway", d.gateway) : cell("Gateway", "Conflict: " + (d.candidates || []).join(", "), "⚠"),
    ], false, ["gateways"]);

    renderSection("quotas", lists.resourcequotas || [], r => [
      cell("Namespace", r.namespace),
      cell("Name", r.name),
      cell("Used / hard", (r.quota || []).join(", ") || "—"),
    ], true, ["resourcequotas"]);

    // A kind the cluster doesn't serve has no section; "Not watched" says why.
    document.getElementById("applications").hidden = missing.has("applications");
    document.getElementById("gateways").hidden = missing.has("gateways");
    document.getElementById("domains").hidden = missing.has("gateways");
    document.getElementById("virtualservices").hidden = missing.has("virtualservices");
    document.getElementById("runs").hidden = Object.keys(runKinds).every(k => missing.has(k));
  }

  function toggle(tr) {
    const key = tr.dataset.key;
    opened = opened === key ? null : key;
    if (opened && !details.has(key)) details.fetch(key);
    renderInventory();
    const again = main.querySelector('tr.object[data-key="' + CSS.escape(key) + '"]');
    if (again) again.focus();
  }
  main.addEventListener("click", e => {
    const tr = e.target.closest("tr.object");
    if (tr && !e.target.closest("a, button")) toggle(tr);
  });
  main.addEventListener("keydown", e => {
    if ((e.key === "Enter" || e.key === " ") && e.target.matches("tr.object")) {
      e.preventDefault();
      toggle(e.target);
    }
  });

  namespace.addEventListener("change", () => {
    for (const id of Object.keys(limit)) delete limit[id];
    renderInventory();
  });
  for (const section of document.querySelectorAll("section.inventory")) {
    section.querySelector(".more button").addEventListener("click", () => {
      limit[section.id] = (limit[section.id] || PAGE) + PAGE;
      renderInventory();
      // The last rows shown hide the button: keep the keyboard's place in
      // the section rather than drop it back to the page's top.
      if (section.querySelector(".more").hidden) {
        const heading = section.querySelector("h3");
        heading.tabIndex = -1;
        heading.focus();
      }
    });
  }

  load();
  window.tetherLive(base, {
    cluster: e => {
      const c = JSON.parse(e.data);
      if (c.name !== name) return;
      heard++;
      latestKey = inventoryKey(c);
      const statusChanged = statusText(c) !== shownStatus;
      renderCluster(c);
      // A load under way looks at latestKey and heard when it ends.
      if (statusChanged || !inflight && latestKey !== lastKey) schedule();
    },
    // The cluster left the agents list, or this person may no longer see
    // it: loading it again gets the hub's own words for that.
    removed: e => {
      if (JSON.parse(e.data).name === name) schedule();
    },
  });
})();
