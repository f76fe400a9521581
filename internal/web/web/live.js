// The pages' live updates: /api/events as Server-Sent Events. The browser
// tries again by itself after a network break, but gives up for good when
// the hub refuses the stream (401: the session ended, or the hub restarted
// with new keys); a page must not then go on showing old state as if it
// were live. So the page says what happened: signed out, with a link to
// sign in again, or cut off, and tries again every few seconds. While the
// browser is still trying (the hub is down, the network gone), the page
// says so once that has lasted QUIET ms: a hub restarting is back sooner.
"use strict";
// tetherTime writes a time as every page does (page.go's timeFormat):
// 2026-12-03 21:40:05 UTC, the same in every locale. tetherTimeElement is it
// in a <time> that keeps the machine-readable value; empty for no time.
window.tetherTime = function (iso) {
  const d = new Date(iso);
  return iso && !isNaN(d) ? d.toISOString().slice(0, 19).replace("T", " ") + " UTC" : iso || "";
};
window.tetherTimeElement = function (iso) {
  const t = document.createElement("time");
  if (iso) {
    t.dateTime = iso;
    t.textContent = window.tetherTime(iso);
  }
  return t;
};
window.tetherLive = function (base, listeners) {
  const banner = document.getElementById("live");
  const RETRY = 5000;
  const QUIET = 3000;
  let events;
  let away = null; // the timer that says the hub is away

  function say(...parts) {
    banner.replaceChildren(...parts);
    banner.hidden = false;
  }

  async function gaveUp() {
    let status = 0;
    try {
      status = (await fetch(base + "api/clusters", { headers: { Accept: "application/json" } })).status;
    } catch (e) {
      // The hub can't be reached: tried again below.
    }
    if (status === 401) {
      const a = document.createElement("a");
      a.href = location.href;
      a.textContent = "Sign in again";
      say("You are signed out: your session ended, or the hub restarted. This page stopped updating. ", a);
      return;
    }
    say("Live updates stopped: this page may be out of date. Trying again…");
    setTimeout(open, RETRY);
  }

  function open() {
    events = new EventSource(base + "api/events");
    events.addEventListener("open", () => {
      clearTimeout(away);
      away = null;
      banner.hidden = true;
    });
    for (const [type, f] of Object.entries(listeners)) events.addEventListener(type, f);
    events.addEventListener("error", () => {
      if (events.readyState === EventSource.CLOSED) {
        clearTimeout(away);
        away = null;
        gaveUp();
      } else if (away === null) {
        away = setTimeout(() => say("Tether's hub can't be reached: this page may be out of date. Trying again…"), QUIET);
      }
    });
  }
  open();
};
