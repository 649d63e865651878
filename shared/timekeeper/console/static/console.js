// Ask before a form marked data-confirm is sent (pause, resume, Run now). Without
// JavaScript the forms still work, unconfirmed.
document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
