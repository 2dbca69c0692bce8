// Keeps the figures fresh without reloading the page, and asks before a cancel.
// An element with data-src and data-refresh (seconds) gets its HTML from data-src again and
// again; the server escapes everything it sends, as it does for the whole page.
(function () {
  "use strict";
  function keepFresh(box) {
    var every = Math.max(1, Number(box.dataset.refresh) || 5) * 1000;
    var busy = false;
    function refresh() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(box.dataset.src, { credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          if (!response.ok) throw new Error(String(response.status));
          return response.text();
        })
        .then(function (html) {
          box.innerHTML = html;
          box.removeAttribute("data-stale");
        })
        .catch(function (err) {
          box.setAttribute("data-stale", err.message || "offline");
        })
        .finally(function () { busy = false; });
    }
    setInterval(refresh, every);
  }
  document.querySelectorAll("[data-src][data-refresh]").forEach(keepFresh);
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
})();
