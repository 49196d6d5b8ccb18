// sparklog web console: the only script. Keeps the "auto-refresh" box (reload every
// 5 s while it is ticked; remembered in localStorage). Pages work without it.
(function () {
  var box = document.getElementById("auto-refresh");
  if (!box) return;
  var key = "sparklog.console.autoRefresh";
  box.checked = window.localStorage.getItem(key) === "1";
  var timer = null;
  function arm() {
    if (timer) { clearTimeout(timer); timer = null; }
    if (box.checked) timer = setTimeout(function () { window.location.reload(); }, 5000);
  }
  box.addEventListener("change", function () {
    window.localStorage.setItem(key, box.checked ? "1" : "0");
    arm();
  });
  arm();
})();
