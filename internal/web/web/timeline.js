// A cluster's status over the last 24 h (/api/clusters' "timeline") as an
// SVG bar: a span per status, Ready green, Unreachable red, and grey where
// the hub has no record (before it started). Each span's <title> says what
// it was and when, shown on hover. tetherTimeline(el, timeline) renders it
// into el; the cards and the cluster page call it as their data changes.
"use strict";
window.tetherTimeline = function (el, t) {
  if (!el) return;
  const NS = "http://www.w3.org/2000/svg";
  const WIDTH = 1000;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", "0 0 " + WIDTH + " 10");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const now = t ? Date.parse(t.now) : Date.now();
  const from = now - 24 * 3600 * 1000;
  const x = ms => Math.max(0, Math.min(WIDTH, (ms - from) / (now - from) * WIDTH));
  const spans = [];
  const since = t ? Date.parse(t.since) : now;
  if (since > from) spans.push({ start: from, end: since, cls: "none", text: "No record (the hub started since)" });
  const changes = (t && t.changes) || [];
  changes.forEach((c, i) => {
    const start = Date.parse(c.time);
    const end = i + 1 < changes.length ? Date.parse(changes[i + 1].time) : now;
    spans.push({ start, end, cls: c.ready ? "ready" : "unreachable",
      text: c.ready ? "Ready" : "Unreachable" + (c.reason ? ": " + c.reason : "") });
  });
  let unreachable = 0;
  for (const s of spans) {
    const rect = document.createElementNS(NS, "rect");
    rect.setAttribute("x", x(s.start));
    rect.setAttribute("width", Math.max(x(s.end) - x(s.start), s.cls === "none" ? 0 : 8));
    rect.setAttribute("y", 0);
    rect.setAttribute("height", 10);
    rect.setAttribute("class", s.cls);
    const title = document.createElementNS(NS, "title");
    title.textContent = s.text + ", " + window.tetherTime(new Date(s.start).toISOString()) + " to " +
      (s.end >= now ? "now" : window.tetherTime(new Date(s.end).toISOString()));
    rect.append(title);
    svg.append(rect);
    if (s.cls === "unreachable") unreachable++;
  }
  svg.setAttribute("aria-label", "Status over the last 24 h: " + (changes.length === 0 ? "no record" :
    unreachable === 0 ? "Ready throughout what is recorded" : unreachable + " time" + (unreachable === 1 ? "" : "s") + " Unreachable"));
  el.replaceChildren(svg);
  el.dataset.spans = String(spans.length);
};
// The server-rendered ones, from their data-timeline.
for (const el of document.querySelectorAll(".timeline[data-timeline]")) {
  let t = null;
  try { t = JSON.parse(el.dataset.timeline); } catch (e) { /* none */ }
  window.tetherTimeline(el, t);
}
