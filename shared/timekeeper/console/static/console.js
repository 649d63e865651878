// Ask before a form marked data-confirm is sent (pause, resume, Run now), or before a
// button marked data-confirm sends its form (the rule editor's Save; its Preview does not
// ask). Without JavaScript the forms still work, unconfirmed.
document.addEventListener("submit", function (event) {
  var form = event.target;
  var button = event.submitter;
  var question = (button && button.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

// The structured rule editor shows only the fields of the frequency chosen in "How often"
// (its groups name their frequencies in data-frequencies). Without JavaScript every group
// shows, and the server reads the chosen frequency's fields only.
function showFrequencyFields(select) {
  var groups = select.form.querySelectorAll("[data-frequencies]");
  for (var i = 0; i < groups.length; i++) {
    groups[i].hidden = groups[i].getAttribute("data-frequencies").split(" ").indexOf(select.value) < 0;
  }
}
document.addEventListener("change", function (event) {
  if (event.target.id === "rf-frequency") {
    showFrequencyFields(event.target);
  }
});
document.addEventListener("DOMContentLoaded", function () {
  var select = document.getElementById("rf-frequency");
  if (select) {
    showFrequencyFields(select);
  }
});

// "New schedule" shows only the subject of the work kind chosen in "Work" (its groups
// name their kind in data-kinds). Without JavaScript every group shows, and the server
// reads the chosen kind's subject only.
function showKindFields(select) {
  var groups = select.form.querySelectorAll("[data-kinds]");
  for (var i = 0; i < groups.length; i++) {
    groups[i].hidden = groups[i].getAttribute("data-kinds") !== select.value;
  }
}
document.addEventListener("change", function (event) {
  if (event.target.id === "sn-kind") {
    showKindFields(event.target);
  }
});
document.addEventListener("DOMContentLoaded", function () {
  var select = document.getElementById("sn-kind");
  if (select) {
    showKindFields(select);
  }
});

// A page still waiting for something (an export's progress) marks an element with
// data-reload="<seconds>": reload it then, until the page no longer carries the mark.
document.addEventListener("DOMContentLoaded", function () {
  var waiting = document.querySelector("[data-reload]");
  if (!waiting) return;
  var seconds = parseInt(waiting.getAttribute("data-reload"), 10);
  window.setTimeout(function () { window.location.reload(); }, (seconds > 0 ? seconds : 3) * 1000);
});

// Live status: an element marked data-live="<address>" (a render, a delivery's runs, a
// schedule's runs while something is under way) is fetched again from that address every
// data-live-every seconds and replaced by what comes back; the poll stops when the new
// element no longer carries data-live (the work is finished) or the request fails. Without
// JavaScript the element's refresh link reloads the page.
function pollLive(element) {
  var seconds = parseInt(element.getAttribute("data-live-every"), 10);
  window.setTimeout(function () {
    window.fetch(element.getAttribute("data-live"), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("status " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var holder = document.createElement("template");
        holder.innerHTML = html;
        var fresh = holder.content.querySelector("#" + element.id);
        if (!fresh) { return; }
        element.replaceWith(fresh);
        if (fresh.hasAttribute("data-live")) { pollLive(fresh); }
      })
      .catch(function () { /* the refresh link stays */ });
  }, (seconds > 0 ? seconds : 5) * 1000);
}
document.addEventListener("DOMContentLoaded", function () {
  var live = document.querySelectorAll("[data-live][id]");
  for (var i = 0; i < live.length; i++) {
    pollLive(live[i]);
  }
});
