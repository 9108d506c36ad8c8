// Chat page: send without reloading and show the answer as it streams in.
// The server answers a fetch POST with text/event-stream frames: tool, delta, reset,
// message, done (see panager/frontends/web/sse.py). Text is always set with textContent.
(function () {
  "use strict";
  var form = document.getElementById("chat-form");
  var log = document.getElementById("log");
  var status = document.getElementById("status");
  if (!form || !log || !window.fetch || !window.TextDecoder) { return; }
  var box = form.querySelector("textarea");
  var button = form.querySelector("button[type=submit]");
  var picker = document.getElementById("chat-files");
  var attached = document.getElementById("chat-attached");
  var files = [];  // chosen with the button, pasted or dropped; sent with the next message

  function showFiles() {
    attached.textContent = files.map(function (f) { return "📎 " + f.name; }).join("  ");
  }
  function addFiles(list) {
    for (var i = 0; i < list.length && files.length < 4; i++) { files.push(list[i]); }
    showFiles();
  }

  function bubble(who, cls, text) {
    var empty = log.querySelector(".empty");
    if (empty) { empty.remove(); }
    var li = document.createElement("li");
    li.className = "msg " + cls;
    var name = document.createElement("span");
    name.className = "who";
    name.textContent = who;
    var body = document.createElement("div");
    body.className = "text";
    body.textContent = text || "";
    li.appendChild(name);
    li.appendChild(body);
    log.appendChild(li);
    li.scrollIntoView({block: "end"});
    return li;
  }

  function Turn() {
    this.iterations = {};  // iteration -> text element
    this.tools = {};
    this.last = null;
  }
  Turn.prototype.textFor = function (iteration) {
    if (!this.iterations[iteration]) {
      var li = bubble("Panager", "panager streaming", "");
      this.iterations[iteration] = li.querySelector(".text");
    }
    this.last = this.iterations[iteration];
    return this.last;
  };
  Turn.prototype.handle = function (name, data) {
    if (name === "delta") {
      this.textFor(data.iteration).textContent += data.text;
    } else if (name === "reset") {
      if (this.iterations[data.iteration]) { this.iterations[data.iteration].textContent = ""; }
    } else if (name === "message") {
      if (data.text) { this.textFor(data.iteration).textContent = data.text; }
      else if (this.iterations[data.iteration]) {
        this.iterations[data.iteration].parentNode.remove();
        delete this.iterations[data.iteration];
      }
    } else if (name === "tool") {
      var line = this.tools[data.id];
      if (!line) {
        line = document.createElement("li");
        line.className = "tools";
        log.appendChild(line);
        this.tools[data.id] = line;
      }
      var mark = {running: "…", done: "✓", error: "✗"}[data.state] || "";
      line.textContent = data.name + " " + mark;
      status.textContent = data.state === "running" ? "Using " + data.name + "…" : "Thinking…";
    } else if (name === "notice") {
      bubble("Panager", "panager notice", data.text);
    } else if (name === "done") {
      var el = this.last;
      if (el && data.text && data.text.indexOf(el.textContent) === 0) {
        el.textContent = data.text;  // the streamed answer, completed (a fallback's note)
      } else if (!el || (data.text && el.textContent !== data.text)) {
        el = bubble("Panager", "panager", data.text).querySelector(".text");
      }
      var li = el.parentNode;
      li.classList.remove("streaming");
      if (!data.ok) { li.classList.add("failed"); }
      if (data.link && data.link.url) {
        var a = document.createElement("a");
        a.className = "button";
        a.href = data.link.url;
        a.textContent = data.link.label || "Open";
        li.appendChild(a);
      }
      li.scrollIntoView({block: "end"});
      status.textContent = "";
      if (data.question) { window.location.reload(); }  // the question and its buttons
    }
  };

  function parse(block, turn) {
    var name = "message", data = "";
    block.split("\n").forEach(function (line) {
      if (line.indexOf("event: ") === 0) { name = line.slice(7); }
      else if (line.indexOf("data: ") === 0) { data += line.slice(6); }
    });
    if (data) { turn.handle(name, JSON.parse(data)); }
  }

  async function send(text, sending) {
    var body;
    if (sending.length) {
      body = new FormData();
      body.set("csrf", form.querySelector("input[name=csrf]").value);
      body.set("text", text);
      sending.forEach(function (f) { body.append("file", f, f.name || "pasted.png"); });
    } else {
      body = new URLSearchParams(new FormData(form));
      body.delete("file");
      body.set("text", text);
    }
    var turn = new Turn();
    status.textContent = "Thinking…";
    var response = await fetch(form.action, {
      method: "POST", body: body, credentials: "same-origin",
      headers: {"X-Requested-With": "fetch", "Accept": "text/event-stream"}
    });
    if (response.status === 429) {
      status.textContent = "";
      bubble("Panager", "panager failed", "One message is being answered and another is waiting; send this one when an answer arrives.");
      return;
    }
    if (!response.ok || !response.body) {
      status.textContent = "";
      bubble("Panager", "panager failed", "The page could not reach Panager (" + response.status + "). Reload and try again.");
      return;
    }
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var part = await reader.read();
      if (part.done) { break; }
      buffer += decoder.decode(part.value, {stream: true});
      var cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        parse(buffer.slice(0, cut), turn);
        buffer = buffer.slice(cut + 2);
      }
    }
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = box.value.trim();
    var sending = files;
    if (!text && !sending.length) { return; }
    if (sending.length) {
      bubble("You", "you", sending.map(function (f) { return "📎 " + f.name; }).join(", "));
    }
    if (text) { bubble("You", "you", text); }
    box.value = "";
    files = [];
    picker.value = "";
    showFiles();
    button.disabled = true;
    send(text, sending).catch(function () {
      status.textContent = "";
      bubble("Panager", "panager failed", "The connection broke; your message may still be answered — reload the page.");
    }).finally(function () { button.disabled = false; box.focus(); });
  });
  picker.addEventListener("change", function () { addFiles(picker.files); });
  box.addEventListener("paste", function (event) {
    var items = event.clipboardData ? event.clipboardData.files : [];
    if (items && items.length) { event.preventDefault(); addFiles(items); }
  });
  form.addEventListener("dragover", function (event) {
    event.preventDefault();
    form.classList.add("dropping");
  });
  form.addEventListener("dragleave", function () { form.classList.remove("dropping"); });
  form.addEventListener("drop", function (event) {
    event.preventDefault();
    form.classList.remove("dropping");
    if (event.dataTransfer && event.dataTransfer.files) { addFiles(event.dataTransfer.files); }
  });
  box.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
})();
