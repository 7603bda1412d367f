// The console's own progressive enhancement: a page whose <main> says data-refresh asks the
// console every few seconds where the event index is, and when it moved (or always, for the
// overview) fetches the same page again and swaps its <main> in place. Without this script every
// page still works; it only stops refreshing by itself. Nothing here runs while a form has focus.
(function () {
  "use strict";
  const main = document.querySelector("main[data-refresh]");
  if (!main) { return; }
  const every = Number(document.body.dataset.refreshMs) || 2000;
  const always = main.dataset.refresh === "always";
  let cursor = main.dataset.cursor;

  async function tick() {
    try {
      const answer = await fetch("/api/cursor", { cache: "no-store", credentials: "same-origin" });
      if (answer.ok) {
        const now = String((await answer.json()).cursor);
        const busy = main.contains(document.activeElement) && document.activeElement !== main
          && document.activeElement.matches("input, select, textarea");
        if ((always || now !== cursor) && !busy) {
          const page = await fetch(window.location.href, {
            cache: "no-store", credentials: "same-origin",
            headers: { "x-console-fragment": "1" },
          });
          if (page.ok) {
            main.innerHTML = await page.text();
            cursor = now;
            main.dataset.cursor = now;
            const stamp = document.getElementById("refreshed");
            if (stamp) {
              stamp.textContent = "event index at " + now + ": refreshed at "
                + new Date().toLocaleTimeString();
            }
          }
        }
      }
    } catch (e) {
      // The console is away for now (restarting, or the network): try again at the next tick.
    } finally {
      window.setTimeout(tick, every);
    }
  }
  window.setTimeout(tick, every);
})();
