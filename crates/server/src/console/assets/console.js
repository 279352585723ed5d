// joch console: countdowns to approval deadlines, errors of htmx actions
// shown in the page's alert region, and edited arguments checked (the
// generated fields by the browser, the JSON to be an object) and merged
// before they are sent (the server then checks the schema).
(function () {
  function tick() {
    document.querySelectorAll("[data-deadline]").forEach(function (el) {
      var left = Math.round((Date.parse(el.getAttribute("data-deadline")) - Date.now()) / 1000);
      var text = left <= 0 ? "deadline passed" : Math.floor(left / 60) + "m " + (left % 60) + "s left";
      if (el.textContent !== text) el.textContent = text;
    });
  }
  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tick);
  function alertRegion() { return document.getElementById("alert"); }
  document.addEventListener("htmx:responseError", function (e) {
    var region = alertRegion();
    if (!region) return;
    var text = e.detail.xhr.responseText;
    try { var body = JSON.parse(text); text = body.message + " (" + body.code + ")"; } catch (_) {}
    region.textContent = text;
  });
  document.addEventListener("htmx:beforeRequest", function () {
    var region = alertRegion();
    if (region) region.textContent = "";
  });
  // The edit form: each generated field checked by the browser (the
  // schema's constraints), the JSON checked to be an object, then the
  // fields written into the JSON, which alone is sent.
  function refuse(e, el, message) {
    e.preventDefault();
    var details = el.closest("details");
    if (details) details.open = true;
    if (message !== undefined) el.setCustomValidity(message);
    el.reportValidity();
  }
  document.addEventListener("htmx:confirm", function (e) {
    var submitter = e.detail.triggeringEvent && e.detail.triggeringEvent.submitter;
    if (!submitter || submitter.value !== "edit") return;
    var area = e.target.querySelector("textarea[name=input]");
    var value;
    try {
      value = JSON.parse(area.value);
      if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("not an object");
      area.setCustomValidity("");
    } catch (err) {
      return refuse(e, area, "The arguments must be a JSON object");
    }
    var fields = e.target.querySelectorAll("[data-arg]");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i], key = f.getAttribute("data-arg"), type = f.getAttribute("data-type");
      if (!f.checkValidity()) return refuse(e, f);
      if (type === "boolean") value[key] = f.checked;
      else if (f.value === "") delete value[key];
      else if (type === "integer" || type === "number") value[key] = Number(f.value);
      else value[key] = f.value;
    }
    if (fields.length) area.value = JSON.stringify(value, null, 2);
  });
})();
