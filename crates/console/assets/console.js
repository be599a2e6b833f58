// kasi console: progressive enhancement only. Every page works without
// this script; with it, a section marked data-refresh-s refreshes in place
// (the overview's live figures), without losing the scroll position, and
// a screen reader hears only the one-line summary, when it changes.
// Refreshes say so (X-Console-Refresh), so that a page left open does not
// keep its session alive; when a refresh fails (signed out, hub down) the
// page says since when its figures are old instead of freezing silently.
"use strict";
(function () {
  const live = document.querySelector("[data-refresh-s]");
  if (!live) return;
  const seconds = Math.max(2, Number(live.getAttribute("data-refresh-s")) || 5);
  let lastGood = new Date();
  function stale(why) {
    let note = document.getElementById("stale-note");
    if (!note) {
      note = document.createElement("p");
      note.id = "stale-note";
      note.className = "flash error";
      note.setAttribute("role", "alert");
      live.parentNode.insertBefore(note, live);
    }
    note.textContent = "Not refreshed since " + lastGood.toISOString().slice(11, 19) +
      " UTC: " + why + " Reload the page (you may need to sign in again).";
  }
  async function refresh() {
    try {
      const answer = await fetch(window.location.href, {
        credentials: "same-origin",
        headers: { Accept: "text/html", "X-Console-Refresh": "1" },
      });
      if (answer.redirected) return stale("the session has ended.");
      if (!answer.ok) return stale("the hub answered " + answer.status + ".");
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const fresh = page.getElementById(live.id);
      if (!fresh) return stale("the answer was not the overview.");
      live.replaceChildren(...fresh.childNodes);
      // The summary line is the page's only live region: rewritten (and so
      // announced) only when its words change, never on a plain refresh.
      const summaryId = live.getAttribute("data-summary");
      const summary = summaryId && document.getElementById(summaryId);
      const freshSummary = summaryId && page.getElementById(summaryId);
      if (summary && freshSummary && summary.textContent !== freshSummary.textContent) {
        summary.textContent = freshSummary.textContent;
      }
      live.setAttribute("data-rendered", fresh.getAttribute("data-rendered") || "");
      lastGood = new Date();
      const note = document.getElementById("stale-note");
      if (note) note.remove();
      live.setAttribute("data-refreshed", lastGood.toISOString());
    } catch (error) {
      stale("the hub did not answer.");
    } finally {
      window.setTimeout(refresh, seconds * 1000);
    }
  }
  window.setTimeout(refresh, seconds * 1000);
})();
