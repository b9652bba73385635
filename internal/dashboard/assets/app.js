// Live updates: the server watches the namespace's Modules, Remotes and
// plans and, when what this page shows changes, sends the changed parts
// (grid rows, or the whole body) as server-sent events; they are swapped
// in place. No framework, nothing fetched from elsewhere.
(function () {
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var events = document.currentScript.src.replace(/static\/app\.js$/, "events");
  var source = new EventSource(events + "?src=" + encodeURIComponent(live.dataset.src) +
    "&shown=" + encodeURIComponent(live.dataset.shown));
  source.onmessage = function (e) {
    JSON.parse(e.data).parts.forEach(function (p) {
      if (!p.id) { live.innerHTML = p.html; return; }
      var el = document.getElementById(p.id);
      if (el) el.outerHTML = p.html;
    });
    live.dataset.updated = String(Date.now());
  };
})();
