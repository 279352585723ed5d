// joch console: countdowns to approval deadlines, errors of htmx actions
// shown in the page's alert region, and edited arguments checked to be a
// JSON object before they are sent (the server then checks the schema).
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
  document.addEventListener("htmx:confirm", function (e) {
    var submitter = e.detail.triggerEvent && e.detail.triggerEvent.submitter;
    if (!submitter || submitter.value !== "edit") return;
    var area = e.target.querySelector("textarea[name=input]");
    try {
      var value = JSON.parse(area.value);
      if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("not an object");
      area.setCustomValidity("");
    } catch (err) {
      e.preventDefault();
      area.setCustomValidity("The arguments must be a JSON object");
      area.reportValidity();
    }
  });
})();
