// Reminders shown while a page is open: one long-lived stream (GET /notices, see
// panager/frontends/web/notices.py). Text is always set with textContent; a link only when it is
// http(s).
(function () {
  "use strict";
  var box = document.getElementById("notices");
  if (!box || !window.EventSource) { return; }
  var stream = new EventSource("/notices");
  stream.addEventListener("notice", function (event) {
    var data;
    try { data = JSON.parse(event.data); } catch (e) { return; }
    var item = document.createElement("p");
    item.className = "notice";
    item.setAttribute("role", "status");
    item.textContent = "🔔 " + (data.text || "");
    if (data.link && /^https?:\/\//.test(data.link.url || "")) {
      var a = document.createElement("a");
      a.href = data.link.url;
      a.rel = "noopener noreferrer";
      a.textContent = " " + (data.link.label || "Link");
      item.appendChild(a);
    }
    box.insertBefore(item, box.firstChild);
  });
})();
