// An inventory row's details on the cluster page, shown below the row once
// it is opened: the object's conditions and every event the hub keeps for
// it (/api/clusters/<name>/events?namespace=…&object=Kind/name), newest
// first. Everything from the cluster goes in as text, never as HTML.
"use strict";
window.tetherDetails = function (api, fetched) {
  const events = new Map(); // "namespace\nKind/name" → its events, or why there are none to show

  // row is the row below an opened one, span cells wide.
  function row(r, key, span) {
    const tr = document.createElement("tr");
    tr.className = "details";
    const td = document.createElement("td");
    td.colSpan = span;
    td.dataset.label = "Details";
    const title = document.createElement("p");
    title.textContent = key.split("\n")[1] + (r.namespace ? " in " + r.namespace : "");
    const list = document.createElement("ul");
    const item = (...parts) => {
      const li = document.createElement("li");
      li.append(...parts);
      list.append(li);
    };
    for (const c of r.conditions || []) {
      item(c.type + " " + c.status + (c.reason ? " · " + c.reason : "") + (c.message ? ": " + c.message : ""));
    }
    const got = events.get(key);
    if (got === undefined) item("Loading its events…");
    else if (typeof got === "string") item(got);
    else if (got.length === 0) item("No events the hub keeps for it.");
    else {
      for (const e of got.slice().sort((a, b) => (b.lastSeen || "").localeCompare(a.lastSeen || ""))) {
        item(window.tetherTimeElement(e.lastSeen), " " + e.reason + (e.count > 1 ? " ×" + e.count : "") + (e.message ? ": " + e.message : ""));
      }
    }
    td.append(title, list);
    tr.append(td);
    return tr;
  }

  // fetch asks the hub for key's events, then calls fetched(key).
  async function fetch(key) {
    const [ns, object] = key.split("\n");
    let v;
    try {
      const r = await window.fetch(api + "/events?namespace=" + encodeURIComponent(ns) + "&object=" + encodeURIComponent(object),
        { headers: { Accept: "application/json" } });
      v = r.ok ? await r.json() : "Its events can't be shown: " + ((await r.text()).trim() || "HTTP " + r.status);
    } catch (e) {
      v = "Its events can't be shown: the hub didn't answer.";
    }
    events.set(key, v);
    fetched(key);
  }

  return {
    row,
    fetch,
    has: key => events.has(key),
    // forgetBut drops what was fetched for rows no longer open.
    forgetBut: key => { for (const k of events.keys()) if (k !== key) events.delete(k); },
  };
};
