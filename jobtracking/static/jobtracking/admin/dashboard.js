"use strict";
// Fetch the dashboard's body again and swap it in place; skip while the tab is hidden.
(function () {
  const body = document.getElementById("dashboard");
  const state = document.getElementById("refresh-state");
  async function refresh() {
    if (document.hidden) return;
    try {
      const response = await fetch("?partial=1", {headers: {"X-Requested-With": "fetch"}, credentials: "same-origin"});
      if (!response.ok) throw new Error("HTTP " + response.status);
      body.innerHTML = await response.text();
      const stamp = body.querySelector("[data-updated]");
      if (stamp) document.getElementById("updated").textContent = stamp.dataset.updated;
      state.textContent = "live";
    } catch (error) {
      state.textContent = "refresh failed (" + error.message + "), retrying";
    }
  }
  setInterval(refresh, Number(body.dataset.refreshSeconds) * 1000);
})();
