// AceMQ console: live counts on the overview, live progress of a replay,
// and the purge button enabled only once the queue's name is typed. The
// pages work without it.
"use strict";

function poll(url, every, apply) {
  let stopped = false;
  async function tick() {
    if (stopped) return;
    try {
      const r = await fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } });
      if (r.ok && apply(await r.json()) === false) { stopped = true; return; }
    } catch (e) { /* the next tick tries again */ }
    setTimeout(tick, every);
  }
  setTimeout(tick, every);
}

function liveCounts() {
  const table = document.getElementById("counts");
  if (!table) return;
  poll(table.dataset.poll, 2000, (data) => {
    for (const q of data.queues || []) {
      const row = table.querySelector(`tr[data-queue="${CSS.escape(q.source)}"]`);
      if (!row) continue;
      for (const kind of ["dlq", "parked"]) {
        const cell = row.querySelector(`[data-count="${kind}"]`);
        if (cell && cell.textContent !== String(q[kind])) {
          cell.textContent = String(q[kind]);
          cell.classList.add("changed");
        }
      }
    }
  });
}

function liveJob() {
  const job = document.getElementById("job");
  if (!job || job.dataset.finished === "true") return;
  poll(job.dataset.poll, 400, (s) => {
    for (const el of job.querySelectorAll("[data-field]")) {
      el.textContent = String(s[el.dataset.field]);
    }
    const bar = document.getElementById("progress");
    bar.max = s.total; bar.value = s.done;
    if (s.finished) { window.location.reload(); return false; }
  });
}

function purgeConfirm() {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    const input = form.querySelector("input[name=confirm]");
    const button = form.querySelector("button");
    const check = () => { button.disabled = input.value !== form.dataset.confirm; };
    input.addEventListener("input", check);
    check();
  }
}

document.addEventListener("DOMContentLoaded", () => { liveCounts(); liveJob(); purgeConfirm(); });
