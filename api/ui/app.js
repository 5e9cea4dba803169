// The dashboard: polls this node's JSON API once a second and renders the
// locks, the cluster and the node's recent events. Every text from the
// service goes in through textContent, never as HTML.
"use strict";

const api = (service, method, body) =>
  fetch("/fencelock.v1." + service + "/" + method, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body || {}),
  }).then(async (r) => {
    const doc = await r.json().catch(() => ({}));
    if (!r.ok) { const e = new Error(doc.message || "HTTP " + r.status); e.code = doc.code; throw e; }
    return doc;
  });

const $ = (id) => document.getElementById(id);

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fill(tbody, rows, render) {
  const next = document.createElement("tbody");
  rows.forEach((r) => { const tr = document.createElement("tr"); render(tr, r); next.appendChild(tr); });
  tbody.replaceWith(next);
}

// seconds of a JSON duration ("10s", "1.5s").
const secs = (d) => (d ? parseFloat(d) : 0);

function ago(ms) {
  if (ms < 0) ms = 0;
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
}

function renderLocks(locks, more) {
  $("lock-count").textContent = locks.length + (more ? "+ (first page)" : "");
  $("no-locks").hidden = locks.length > 0;
  const now = Date.now();
  fill($("locks").tBodies[0], locks, (tr, l) => {
    tr.dataset.lock = l.name;
    cell(tr, l.name);
    cell(tr, l.holder || "(free)", l.holder ? "" : "muted");
    cell(tr, l.token || "", "token num");
    cell(tr, l.acquired ? ago(now - Date.parse(l.acquired)) : "", "num");
    const left = l.expires ? Date.parse(l.expires) - now : null;
    const ex = cell(tr, left === null ? "" : ago(left), "num");
    if (left !== null && left < secs(l.ttl) * 1000 / 3) ex.classList.add("soon");
    const w = l.waiters || [];
    const wc = cell(tr, w.length || "", "num");
    wc.title = w.map((x) => x.holder || "(no label)").join("\n");
  });
}

function renderCluster(st) {
  $("node").textContent = (st.id || "?") + " · " + (st.version || "");
  const badge = $("state");
  badge.textContent = st.state + (st.state === "leader" && !st.ready ? " (re-arming leases)" : "");
  badge.className = "badge " + st.state;
  const sum = $("cluster-summary");
  sum.replaceChildren();
  [["leader", st.leaderId || "none"], ["term", st.term || "0"], ["commit index", st.commitIndex || "0"],
   ["applied index", st.appliedIndex || "0"],
   ["last contact", st.state === "leader" ? "—" : Math.round(secs(st.lastContact) * 1000) + " ms"]]
    .forEach(([k, v]) => { const d = document.createElement("div"); const b = document.createElement("b");
      b.textContent = v; d.append(b, k); sum.appendChild(d); });
  fill($("members").tBodies[0], st.members || [], (tr, m) => {
    cell(tr, m.id);
    cell(tr, m.apiAddr || "(not recorded yet)");
    cell(tr, m.raftAddr);
    cell(tr, m.leader ? "leader" : (m.voter ? "voter" : "non-voter"));
  });
}

function renderEvents(evs) {
  $("no-events").hidden = evs.length > 0;
  fill($("events").tBodies[0], evs.slice(0, 50), (tr, e) => {
    cell(tr, new Date(e.time).toLocaleTimeString());
    cell(tr, e.kind, "kind-" + e.kind);
    cell(tr, e.lock);
    cell(tr, e.token || "", "token num");
    cell(tr, e.holder);
    cell(tr, e.detail, "muted");
  });
}

async function refresh() {
  const alert = $("alert");
  try {
    const st = await api("ClusterService", "Status");
    renderCluster(st);
    const problems = [];
    if (!st.leaderId) problems.push("No leader: locks cannot be granted, renewed or released.");
    if (st.state === "leader") {
      const ans = await api("LockService", "List", {pageSize: 1000});
      $("locks-elsewhere").hidden = true;
      $("locks").hidden = false;
      renderLocks(ans.locks || [], !!ans.nextPageToken);
    } else {
      const el = $("locks-elsewhere");
      el.hidden = false;
      el.replaceChildren("Locks are served by the leader" + (st.leaderApi ? ": " : "."));
      if (st.leaderApi) {
        const a = document.createElement("a");
        a.href = location.protocol + "//" + st.leaderApi + "/ui/";
        a.textContent = st.leaderApi + "/ui/";
        el.appendChild(a);
      }
      $("locks").hidden = true;
      $("no-locks").hidden = true;
    }
    // The audit trail is for admins: others see the pane empty.
    const evr = await fetch("/ui/events");
    renderEvents(evr.ok ? (await evr.json()) || [] : []);
    alert.hidden = problems.length === 0;
    alert.textContent = problems.join(" ");
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    alert.hidden = false;
    alert.textContent = "This node does not answer: " + e.message;
    $("state").textContent = "down";
    $("state").className = "badge down";
  }
}

refresh();
setInterval(refresh, 1000);
