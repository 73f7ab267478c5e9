// hookgate console: the pages' one script, served from this origin (the
// Content-Security-Policy allows no inline script). Every page works without it;
// it adds Copy buttons and the Entries page's live mode.
(function () {
  "use strict";

  // Copy buttons: <button data-copy="ID" hidden> copies the text of element ID.
  function setUpCopy() {
    var buttons = document.querySelectorAll("button[data-copy]");
    if (!navigator.clipboard || !window.isSecureContext) {
      return; // They stay hidden: the text can still be selected by hand.
    }
    buttons.forEach(function (button) {
      button.hidden = false;
      var label = button.textContent;
      button.addEventListener("click", function () {
        var target = document.getElementById(button.getAttribute("data-copy"));
        if (!target) {
          return;
        }
        var text = "value" in target ? target.value : target.textContent;
        navigator.clipboard.writeText(text).then(
          function () { flash(button, "Copied", label); },
          function () { flash(button, "Copy failed", label); }
        );
      });
    });
  }

  function flash(button, text, label) {
    button.textContent = text;
    setTimeout(function () { button.textContent = label; }, 1500);
  }

  // Live mode: poll for rows newer than the newest shown, every 2 s, while the tab is
  // visible; at most MAX_ROWS rows kept, and an hour of polling at most.
  var INTERVAL_MS = 2000;
  var MAX_ROWS = 500;
  var MAX_POLLS = 1800;

  function setUpLive() {
    var table = document.querySelector("table[data-live]");
    if (!table || !table.tBodies.length || !window.fetch || !window.DOMParser) {
      return;
    }
    var body = table.tBodies[0];
    var url = table.getAttribute("data-live");
    var status = document.getElementById("live-status");
    var polls = 0;

    function say(text) {
      if (status) {
        status.textContent = text;
      }
    }

    function newest() {
      var row = body.querySelector("tr[data-id]");
      return row ? row.getAttribute("data-id") : "";
    }

    function shown(id) {
      return Array.prototype.some.call(body.querySelectorAll("tr[data-id]"), function (r) {
        return r.getAttribute("data-id") === id;
      });
    }

    function later() {
      setTimeout(poll, INTERVAL_MS);
    }

    function poll() {
      if (document.hidden) {
        return later();
      }
      polls += 1;
      if (polls > MAX_POLLS) {
        say("Live mode stopped after an hour: reload the page to go on.");
        return;
      }
      var sep = url.indexOf("?") === -1 ? "?" : "&";
      fetch(url + sep + "after=" + encodeURIComponent(newest()), {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
        redirect: "manual"
      })
        .then(function (response) {
          if (response.type === "opaqueredirect" || response.status === 303) {
            throw new Error("logged out");
          }
          if (!response.ok) {
            throw new Error("HTTP " + response.status);
          }
          return response.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var rows = doc.querySelectorAll("tbody tr[data-id]");
          var added = 0;
          // Newest first in the answer: insert the oldest first, each on top.
          for (var i = rows.length - 1; i >= 0; i--) {
            if (!shown(rows[i].getAttribute("data-id"))) {
              body.insertBefore(document.importNode(rows[i], true), body.firstChild);
              added += 1;
            }
          }
          if (added > 0) {
            var empty = body.querySelector("tr.empty");
            if (empty) {
              empty.remove();
            }
          }
          var all = body.querySelectorAll("tr[data-id]");
          for (var j = all.length - 1; j >= MAX_ROWS; j--) {
            all[j].remove();
          }
          if (doc.querySelector("[data-more]")) {
            say("More entries arrived than live mode shows at once: reload the page to see them all.");
          } else {
            say("Live: checked at " + new Date().toLocaleTimeString() + (added ? ", " + added + " new" : ""));
          }
          later();
        })
        .catch(function (e) {
          if (e && e.message === "logged out") {
            say("Live mode stopped: the session ended. Log in again.");
            return;
          }
          say("Live: the gateway did not answer; trying again.");
          later();
        });
    }

    later();
  }

  setUpCopy();
  setUpLive();
})();
