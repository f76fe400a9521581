// The cluster page's recordings: the sessions with a terminal that the
// person may watch (their own; everyone's for the viewers' groups), each a
// link to its player page. Shown only when the hub records sessions.
"use strict";
(function () {
  const main = document.getElementById("cluster");
  const section = document.getElementById("recordings");
  if (!main || !section) return;
  const base = main.dataset.base;
  const name = main.dataset.name;
  const tbody = section.querySelector("tbody");
  const empty = section.querySelector(".empty");

  function size(n) {
    if (n < 1024) return n + " B";
    if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
    return (n / (1 << 20)).toFixed(1) + " MiB";
  }

  function cell(row, label, text) {
    const td = document.createElement("td");
    td.dataset.label = label;
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  fetch(base + "api/clusters/" + encodeURIComponent(name) + "/recordings", { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : null))
    .then((data) => {
      if (!data || !data.enabled) return;
      section.hidden = false;
      tbody.replaceChildren();
      for (const rec of data.recordings) {
        const row = document.createElement("tr");
        const when = cell(row, "Started", "");
        const a = document.createElement("a");
        a.href = base + "cluster/" + encodeURIComponent(name) + "/recordings/" + encodeURIComponent(rec.requestId);
        a.textContent = new Date(rec.time).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
        when.appendChild(a);
        cell(row, "Person", rec.person);
        cell(row, "Pod", rec.namespace + "/" + rec.pod + (rec.container ? " (" + rec.container + ")" : ""));
        cell(row, "Command", rec.verb === "attach" ? "(attach)" : (rec.command || []).join(" "));
        cell(row, "Size", size(rec.size || 0));
        tbody.appendChild(row);
      }
      empty.hidden = data.recordings.length > 0;
      // Hub replicas that didn't answer: their recordings are missing.
      let left = section.querySelector(".left-out");
      if (!left) {
        left = document.createElement("p");
        left.className = "left-out help";
        section.appendChild(left);
      }
      left.hidden = !data.leftOut;
      left.textContent = data.leftOut ? "Not listed, as these hub replicas didn't answer: " + data.leftOut.join("; ") : "";
    })
    .catch(() => {});
})();
