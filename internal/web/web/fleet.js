// The fleet page: cards rendered by the hub, kept live from /api/events
// (a card added or updated for each "cluster" event, taken away for each
// "removed" one), filtered by labels as the person types.
"use strict";
(function () {
  const list = document.getElementById("clusters");
  const base = list.dataset.base;
  const filter = document.getElementById("filter");
  const count = document.getElementById("count");
  const template = document.getElementById("card-template");

  function labelText(labels) {
    return Object.keys(labels || {}).sort().map(k => k + "=" + labels[k]).join(" ");
  }

  // fact mirrors the hub's card template (page.go): one number of the
  // summary as an icon and a text, or a dash when the cluster hasn't sent it.
  function fact(dd, present, bad, text) {
    dd.querySelector(".icon").textContent = present ? (bad ? "⚠" : "✔") : "";
    dd.querySelector(".text").textContent = present ? text : "—";
  }

  function renderSummary(card, s) {
    s = s || {};
    const num = v => typeof v === "number";
    const nodes = num(s.nodesReady) && num(s.nodesTotal);
    fact(card.querySelector("dd.nodes"), nodes, s.nodesReady < s.nodesTotal || s.nodesTotal === 0,
      s.nodesTotal === 0 ? "no nodes (an API server without nodes, like tether dev's)" : s.nodesReady + " / " + s.nodesTotal + " ready");
    fact(card.querySelector("dd.pods"), num(s.podsNotReady), s.podsNotReady > 0, String(s.podsNotReady));
    const apps = num(s.appsOutOfSync);
    fact(card.querySelector("dd.apps"), apps, s.appsOutOfSync > 0, s.appsOutOfSync + " out of sync or unhealthy");
    for (const el of card.querySelectorAll(".apps")) el.hidden = !apps;
  }

  function render(card, c) {
    card.dataset.name = c.name;
    card.dataset.status = c.status;
    card.dataset.labels = JSON.stringify(c.labels || {});
    const link = card.querySelector(".name");
    link.textContent = c.name;
    link.href = base + "cluster/" + encodeURIComponent(c.name);
    card.querySelector(".status .icon").textContent = c.status === "Ready" ? "✔" : "✖";
    card.querySelector(".status .text").textContent = c.status + (c.message ? ": " + c.message : "");
    card.querySelector(".k8s").textContent = c.kubernetesVersion || "";
    card.querySelector(".agent").textContent = c.agentVersion || "";
    card.querySelector(".since").replaceChildren(window.tetherTimeElement(c.connectedSince));
    const labels = card.querySelector(".labels");
    labels.textContent = labelText(c.labels);
    labels.hidden = labels.textContent === "";
    renderSummary(card, c.summary);
    window.tetherTimeline(card.querySelector(".timeline"), c.timeline);
  }

  function cardOf(name) {
    return list.querySelector('.card[data-name="' + CSS.escape(name) + '"]');
  }

  function upsert(c) {
    seen.add(c.name);
    let card = cardOf(c.name);
    if (!card) {
      card = template.content.firstElementChild.cloneNode(true);
      const after = Array.from(list.children).find(el => el.dataset.name > c.name);
      list.insertBefore(card, after || null);
    }
    render(card, c);
    applyFilter();
  }

  function remove(name) {
    seen.add(name);
    const card = cardOf(name);
    if (card) card.remove();
    applyFilter();
  }

  // A stream that starts (again, after the hub restarted or the network
  // broke) sends every cluster the person sees, but not those that went
  // away while no stream was open: their cards are taken away once the
  // list of clusters says they are gone. A card an event has touched since
  // the stream opened is the stream's to keep or take away.
  let seen = new Set();
  async function dropStale() {
    seen = new Set();
    const mark = seen;
    let r;
    try {
      r = await fetch(base + "api/clusters", { headers: { Accept: "application/json" } });
    } catch (e) {
      return;
    }
    if (!r.ok || mark !== seen) return; // signed out, or another stream opened since
    const names = new Set((await r.json()).map(c => c.name));
    if (mark !== seen) return;
    for (const card of Array.from(list.children)) {
      if (!names.has(card.dataset.name) && !seen.has(card.dataset.name)) card.remove();
    }
    applyFilter();
  }

  // The filter's words: key=value (or key="a value with spaces") is a
  // label; any other word, part of a cluster's name.
  function filterWords() {
    return (filter.value.match(/[^\s=]+="[^"]*"?|\S+/g) || []).map(w => {
      const i = w.indexOf("=");
      return i < 0 ? { part: w } : { key: w.slice(0, i), value: w.slice(i + 1).replace(/^"(.*?)"?$/, "$1") };
    });
  }

  function applyFilter() {
    const wanted = filterWords();
    let shown = 0;
    for (const card of list.children) {
      const have = JSON.parse(card.dataset.labels || "{}");
      const match = wanted.every(w => w.key === undefined ? card.dataset.name.includes(w.part) : have[w.key] === w.value);
      card.hidden = !match;
      if (match) shown++;
    }
    const total = list.children.length;
    const clusters = total === 1 ? " cluster" : " clusters";
    count.textContent = wanted.length ? shown + " of " + total + clusters : total + clusters;
  }

  filter.addEventListener("input", applyFilter);
  applyFilter();

  window.tetherLive(base, {
    open: dropStale,
    cluster: e => upsert(JSON.parse(e.data)),
    removed: e => remove(JSON.parse(e.data).name),
  });
})();
