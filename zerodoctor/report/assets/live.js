// zerodoctor: a live page (watch --html) updated in place, without a reload that would lose the reader's place.
// watch rewrites <page>.live.js beside the page after each judgement. Every few seconds the page loads it again
// as a script: a page opened from a file may load a script beside it, where it may not fetch a data file. The
// script calls zdLive with the new body and plot data; the page swaps them in when their stamp changed.
(function () {
  "use strict";
  const root = document.getElementById("zd-live");
  window.zdLive = function (update) {
    if (update.stamp === root.dataset.stamp) return;
    root.dataset.stamp = update.stamp;
    const open = new Set([...root.querySelectorAll("details[open] > summary")].map((s) => s.textContent));
    root.innerHTML = update.body;
    for (const summary of root.querySelectorAll("details > summary")) {  // what the reader opened stays open
      if (open.has(summary.textContent)) summary.parentElement.open = true;
    }
    document.getElementById("zd-data").textContent = JSON.stringify({ runs: update.runs });
    window.zdDraw();
    document.body.dataset.liveUpdates = Number(document.body.dataset.liveUpdates || 0) + 1;
  };
  setInterval(function () {
    const script = document.createElement("script");
    script.src = root.dataset.src + "?" + Date.now();  // a file URL's query is ignored; it defeats any cache
    script.onload = script.onerror = function () { script.remove(); };
    document.head.appendChild(script);
  }, Number(root.dataset.everyS) * 1000);
})();
