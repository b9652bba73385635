// Live updates: the server sends an event whenever a Module, Remote or plan
// of the namespace changes (from watches); the page refetches its own
// fragment and swaps it in. No framework, nothing fetched from elsewhere.
(function () {
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var source = new EventSource(document.currentScript.src.replace(/static\/app\.js$/, "events"));
  source.onmessage = function () {
    fetch(live.dataset.src, {headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { live.innerHTML = html; live.dataset.updated = String(Date.now()); });
  };
})();
