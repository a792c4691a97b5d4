// insandbox view: the little the pages need beyond htmx.
(function () {
  "use strict";
  var HIGHLIGHT_LIMIT = 200000; // characters; bigger texts stay plain (highlighting them would freeze the tab)

  function highlight(root) {
    if (!window.hljs) return;
    root.querySelectorAll("pre code[class*='language-']:not([data-highlighted])").forEach(function (el) {
      if (el.textContent.length <= HIGHLIGHT_LIMIT) window.hljs.highlightElement(el);
      else el.setAttribute("data-highlighted", "skipped");
    });
  }

  // Live pages: <body data-live="/…/events">. Each `change` the server sends becomes a `live-change` event on
  // the body; the fragments that can change listen for it (hx-trigger="live-change from:body") and reload.
  function live() {
    var src = document.body.getAttribute("data-live");
    if (!src || !window.EventSource) return;
    var badge = document.getElementById("live-badge");
    var es = new EventSource(src);
    // said on the page, so a test (or a curious user) can tell the stream is listening
    es.onopen = function () { document.body.setAttribute("data-live-open", ""); };
    es.addEventListener("change", function () { htmx.trigger(document.body, "live-change"); });
    es.addEventListener("end", function () {
      es.close();
      htmx.trigger(document.body, "live-change");
      if (badge) badge.hidden = true;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    highlight(document);
    live();
  });
  document.addEventListener("htmx:afterSettle", function (e) { highlight(e.target); });
})();
