// kasi console: progressive enhancement only. Every page works without
// this script; with it, a section marked data-refresh-s refreshes in place
// (the overview's live figures), without losing the scroll position.
"use strict";
(function () {
  const live = document.querySelector("[data-refresh-s]");
  if (!live) return;
  const seconds = Math.max(2, Number(live.getAttribute("data-refresh-s")) || 5);
  async function refresh() {
    try {
      const answer = await fetch(window.location.href, {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
      });
      if (answer.redirected || !answer.ok) return; // signed out or refused: leave the page as it is
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const fresh = page.getElementById(live.id);
      if (fresh) live.replaceChildren(...fresh.childNodes);
      live.setAttribute("data-refreshed", new Date().toISOString());
    } finally {
      window.setTimeout(refresh, seconds * 1000);
    }
  }
  window.setTimeout(refresh, seconds * 1000);
})();
