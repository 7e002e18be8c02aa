// The Stampede console's page: server-sent snapshots drawn into the
// tables and sparklines, and the room controls. No framework, no other
// origin; every text goes in through textContent.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const keep = 180; // points of each sparkline
  const series = { waiting: [], admitted: [], rate: [], outbox: [], consumer: [], seats: [] };
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const eta = (s) => {
    if (s === null || s === undefined) return "–";
    if (s < 60) return s.toFixed(0) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  };

  function notice(text, bad) {
    const n = $("notice");
    n.textContent = text;
    n.className = "notice" + (bad ? " bad" : " good");
  }

  function partState(id, part) {
    const s = $(id);
    if (!part.configured) { s.textContent = "not configured"; s.className = "part off"; return false; }
    if (!part.available) { s.textContent = "unavailable: " + (part.error || "no answer"); s.className = "part down"; return false; }
    s.textContent = "live"; s.className = "part up";
    return true;
  }

  async function send(method, path, body) {
    const opts = { method, headers: { "X-CSRF-Token": csrf }, credentials: "same-origin" };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(path, opts);
    let data = null;
    try { data = await resp.json(); } catch (e) { /* no body */ }
    if (!resp.ok) {
      const what = data && data.detail ? data.detail : resp.status + " " + resp.statusText;
      throw new Error(what);
    }
    return data;
  }

  async function control(room, action, body) {
    const path = "/console/api/rooms/" + encodeURIComponent(room) + (action ? "/" + action : "");
    try {
      const r = await send(action ? "POST" : "PATCH", path, body);
      drawRoom(r);
      notice(room + ": " + (action || "changed") + " — " + stateOf(r), false);
    } catch (e) {
      notice(room + ": " + e.message, true);
    }
  }

  function stateOf(r) {
    if (r.closed) return "closed";
    if (r.paused) return "paused";
    return "open";
  }

  const rows = new Map();

  function roomRow(name) {
    let row = rows.get(name);
    if (row) return row;
    const tr = el("tr", { "data-room": name });
    const cells = {};
    for (const k of ["name", "state", "waiting", "active", "admitted", "rate", "eta"]) {
      cells[k] = el("td", k === "name" || k === "state" ? {} : { class: "n" });
      tr.appendChild(cells[k]);
    }
    cells.name.textContent = name;
    const ctl = el("td", { class: "controls" });
    const pause = el("button", { id: "pause-" + name, "data-room": name }, "Pause");
    pause.addEventListener("click", () => control(name, pause.dataset.action, undefined));
    const close = el("button", { id: "close-" + name, class: "danger" }, "Close");
    close.addEventListener("click", () => {
      if (close.dataset.armed !== "1") {
        close.dataset.armed = "1";
        close.textContent = "Confirm close";
        setTimeout(() => { close.dataset.armed = ""; close.textContent = "Close"; }, 5000);
        return;
      }
      close.dataset.armed = "";
      close.textContent = "Close";
      control(name, "close", undefined);
    });
    const cap = el("input", { id: "capacity-" + name, type: "number", min: "1", max: "1000000", title: "capacity", "aria-label": "capacity of " + name });
    const out = el("input", { id: "outflow-" + name, type: "number", min: "0", max: "60000000", title: "max admissions per minute (0: no limit)", "aria-label": "outflow of " + name });
    for (const i of [cap, out]) i.addEventListener("input", () => { i.dataset.dirty = "1"; });
    const apply = el("button", { id: "apply-" + name }, "Apply");
    apply.addEventListener("click", async () => {
      const body = {};
      if (cap.value !== "") body.capacity = Number(cap.value);
      if (out.value !== "") body.max_admissions_per_minute = Number(out.value);
      cap.dataset.dirty = ""; out.dataset.dirty = "";
      await control(name, "", body);
    });
    ctl.append(pause, " ", close, " ", el("label", {}, "cap "), cap, el("label", {}, " per min "), out, " ", apply);
    tr.appendChild(ctl);
    $("rooms").tBodies[0].appendChild(tr);
    row = { tr, cells, pause, close, cap, out };
    rows.set(name, row);
    return row;
  }

  function drawRoom(r) {
    const row = roomRow(r.name);
    const st = stateOf(r);
    row.cells.state.textContent = st;
    row.cells.state.className = "state st-" + st;
    row.tr.dataset.state = st;
    row.cells.waiting.textContent = fmt(r.waiting);
    row.cells.active.textContent = fmt(r.active) + " / " + fmt(r.capacity);
    row.cells.admitted.textContent = fmt(r.admitted_total);
    row.cells.rate.textContent = r.rate_per_s.toFixed(1);
    row.cells.eta.textContent = eta(r.eta_seconds);
    row.pause.textContent = r.paused ? "Resume" : "Pause";
    row.pause.dataset.action = r.paused ? "resume" : "pause";
    row.pause.disabled = r.closed;
    row.close.disabled = r.closed;
    for (const [i, v] of [[row.cap, r.capacity], [row.out, r.max_admissions_per_minute]]) {
      if (document.activeElement !== i && i.dataset.dirty !== "1") i.value = v;
    }
  }

  function push(name, v) {
    const s = series[name];
    s.push(v);
    if (s.length > keep) s.shift();
  }

  function spark(name, valueText) {
    const svg = $("spark-" + name);
    const s = series[name];
    $("v-" + name).textContent = valueText;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (s.length < 2) return;
    const max = Math.max(1, ...s.filter((v) => v !== null));
    const pts = [];
    s.forEach((v, i) => {
      if (v === null) return;
      const x = (i / Math.max(s.length - 1, 1)) * 300;
      const y = 46 - (v / max) * 44;
      pts.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    const ns = "http://www.w3.org/2000/svg";
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("class", "line");
    svg.appendChild(line);
  }

  function draw(snap) {
    $("updated").textContent = "updated " + snap.at.replace("T", " ").replace(/\.\d+Z$/, "Z");
    // Rooms.
    const roomsUp = partState("rooms-state", snap.rooms);
    let waiting = null, admitted = null, rate = null;
    if (roomsUp) {
      const seen = new Set();
      waiting = 0; admitted = 0; rate = 0;
      for (const r of snap.rooms.rooms) {
        drawRoom(r);
        seen.add(r.name);
        waiting += r.waiting; admitted += r.admitted_total; rate += r.rate_per_s;
      }
      for (const [name, row] of rows) if (!seen.has(name)) { row.tr.remove(); rows.delete(name); }
    }
    $("rooms").classList.toggle("stale", !roomsUp);
    push("waiting", waiting); push("admitted", admitted); push("rate", rate);
    spark("waiting", fmt(waiting)); spark("admitted", fmt(admitted)); spark("rate", rate === null ? "–" : rate.toFixed(1));

    // Payments.
    const payUp = partState("payments-state", snap.payments);
    const bs = $("by-status");
    while (bs.firstChild) bs.removeChild(bs.firstChild);
    for (const st of ["PENDING", "APPROVED", "DECLINED", "UNKNOWN", "FAILED"]) {
      const box = el("div", { class: "count s-" + st, id: "count-" + st });
      box.append(el("b", {}, payUp ? fmt(snap.payments.by_status[st] || 0) : "–"), el("span", {}, st));
      bs.appendChild(box);
    }
    push("outbox", payUp ? snap.payments.outbox_lag_seconds : null);
    spark("outbox", payUp ? snap.payments.outbox_lag_seconds.toFixed(1) : "–");
    const ft = $("flagged").tBodies[0];
    while (ft.firstChild) ft.removeChild(ft.firstChild);
    $("flagged-count").textContent = payUp ? fmt(snap.payments.flagged_total) + " flagged" : "";
    if (payUp) {
      for (const p of snap.payments.flagged) {
        const tr = el("tr");
        const a = el("a", { href: "/console/payments/" + encodeURIComponent(p.id), class: "mono" }, p.id.slice(0, 8) + "…");
        const td = el("td"); td.appendChild(a);
        tr.append(td, el("td", {}, p.order_id), el("td", { class: "n" }, fmt(p.amount) + " " + p.currency),
          el("td", {}, p.status), el("td", {}, p.review_reason), el("td", {}, p.updated_at.replace("T", " ").slice(0, 19)));
        ft.appendChild(tr);
      }
      if (snap.payments.flagged.length === 0) {
        const tr = el("tr"); tr.appendChild(el("td", { colspan: "6", class: "muted" }, "No payment is flagged for review."));
        ft.appendChild(tr);
      }
    }

    // Workers.
    const wUp = partState("workers-state", snap.workers);
    const wt = $("workers").tBodies[0];
    while (wt.firstChild) wt.removeChild(wt.firstChild);
    for (const w of snap.workers.workers) {
      const tr = el("tr", { class: w.available ? "" : "down" });
      tr.append(el("td", { class: "mono" }, w.url.replace(/^https?:\/\//, "")), el("td", { class: "n" }, w.available ? fmt(w.lag) : "down"),
        el("td", { class: "n" }, w.available ? fmt(w.held) : "–"), el("td", { class: "n" }, w.available ? fmt(w.acked) : "–"));
      wt.appendChild(tr);
    }
    const lagKnown = snap.workers.configured && snap.workers.workers.some((w) => w.available);
    push("consumer", lagKnown ? snap.workers.consumer_lag : null);
    spark("consumer", lagKnown ? fmt(snap.workers.consumer_lag) : "–");
    void wUp;
    const pt = $("parked").tBodies[0];
    while (pt.firstChild) pt.removeChild(pt.firstChild);
    const pk = snap.workers.parked_known;
    $("parked-count").textContent = pk ? fmt(snap.workers.parked.length) + " keys, " + fmt(snap.workers.parked_events) + " events" : "";
    if (pk) {
      for (const k of snap.workers.parked) {
        const tr = el("tr");
        tr.append(el("td", { class: "mono" }, k.key), el("td", { class: "n" }, String(k.partition)), el("td", { class: "n" }, fmt(k.events)),
          el("td", { class: "n" }, fmt(k.attempts)), el("td", {}, k.reason), el("td", {}, k.parked_at.replace("T", " ").slice(0, 19)));
        pt.appendChild(tr);
      }
      if (snap.workers.parked.length === 0) {
        const tr = el("tr"); tr.appendChild(el("td", { colspan: "6", class: "muted" }, "No key is parked."));
        pt.appendChild(tr);
      }
    } else {
      const tr = el("tr"); tr.appendChild(el("td", { colspan: "6", class: "muted" }, "Not shown: start the console with --worker-token (the workers' --admin-token)."));
      pt.appendChild(tr);
    }

    // Seats.
    const cUp = partState("checkout-state", snap.checkout);
    const ev = $("events");
    while (ev.firstChild) ev.removeChild(ev.firstChild);
    let left = null;
    if (cUp) {
      left = 0;
      for (const e of snap.checkout.events) {
        left += e.seats_left;
        const row = el("div", { class: "event", id: "event-" + e.name });
        const bar = el("div", { class: "bar" });
        const sold = e.seats ? (e.sold / e.seats) * 100 : 0, held = e.seats ? (e.held / e.seats) * 100 : 0;
        const s1 = el("i", { class: "sold" }); s1.style.width = sold + "%";
        const s2 = el("i", { class: "held" }); s2.style.width = held + "%";
        bar.append(s1, s2);
        row.append(el("span", { class: "name" }, e.name), bar,
          el("span", { class: "n" }, fmt(e.seats_left) + " left of " + fmt(e.seats) + " · " + fmt(e.sold) + " sold · " + fmt(e.held) + " held"));
        ev.appendChild(row);
      }
    }
    push("seats", left);
    spark("seats", fmt(left));
  }

  function connect() {
    const es = new EventSource("/console/api/stream");
    es.addEventListener("open", () => { $("conn").textContent = "live"; $("conn").className = "conn up"; });
    es.addEventListener("snapshot", (m) => draw(JSON.parse(m.data)));
    es.addEventListener("logout", () => { es.close(); location.href = "/console"; });
    es.addEventListener("error", () => { $("conn").textContent = "reconnecting…"; $("conn").className = "conn down"; });
  }

  $("logout").addEventListener("click", async () => {
    try { await send("POST", "/console/logout"); } catch (e) { /* the cookie is gone either way */ }
    location.href = "/console";
  });
  connect();
})();
