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
