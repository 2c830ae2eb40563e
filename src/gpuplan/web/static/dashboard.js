// gpuplan dashboard: fills the server-rendered shells from the JSON API. No framework, no CDN.
(function () {
  "use strict";
  var CONFIG = { displaylogo: false, responsive: true };
  var DARK = {
    paper_bgcolor: "#1b1f26", plot_bgcolor: "#1b1f26", font: { color: "#d6dae0" },
    margin: { l: 60, r: 20, t: 20, b: 40 }, legend: { bgcolor: "rgba(0,0,0,0)" },
    xaxis: { gridcolor: "#2c323c", type: "date" }, yaxis: { gridcolor: "#2c323c", rangemode: "tozero" },
  };

  function $(id) { return document.getElementById(id); }
  function esc(v) {
    return String(v === null || v === undefined ? "" : v).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }
  function num(v, digits) { return v === null || v === undefined ? "n/a" : Number(v).toFixed(digits); }
  function when(s) { return s === null || s === undefined ? "—" : new Date(s * 1000).toLocaleString(); }
  function getJSON(url) {
    return fetch(url).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) { throw new Error(body.error || body.detail || r.statusText); }
        return body;
      });
    });
  }
  // Plotly (4.8 MB) loads async so tables draw before it has been parsed; charts wait for it. The
  // queue view names it with data-src only: it is fetched once the table is drawn.
  var plotlyPromise = null;
  function plotlyReady() {
    if (plotlyPromise) { return plotlyPromise; }
    plotlyPromise = new Promise(function (resolve, reject) {
      var tag = $("plotly-js");
      if (window.Plotly || !tag) { resolve(); return; }
      if (tag.dataset.src) {
        tag = document.createElement("script");
        tag.src = $("plotly-js").dataset.src;
        tag.async = true;
        document.head.appendChild(tag);
      }
      tag.addEventListener("load", function () { resolve(); });
      tag.addEventListener("error", function () { reject(new Error("cannot load Plotly")); });
    });
    return plotlyPromise;
  }
  function jobLink(id) { return '<a class="job-link" href="/jobs/' + encodeURIComponent(id) + '">' + esc(id) + "</a>"; }
  function layout(extra) { return Object.assign(JSON.parse(JSON.stringify(DARK)), extra || {}); }

  // ------------------------------------------------------------------ node view
  function gpuRows(snap) {
    $("gpu-table").tBodies[0].innerHTML = snap.gpus.map(function (g) {
      return '<tr data-gpu="' + g.index + '"><td>' + g.index + "</td><td>" + esc(g.model) + "</td><td>" +
        esc(g.node) + '</td><td class="num util">' + num(g.util_pct, 0) + '</td><td class="num mem">' +
        num(g.mem_used_gb, 1) + " / " + num(g.mem_total_gb, 0) + '</td><td class="num power">' +
        num(g.power_w, 0) + '</td><td class="num temp">' + num(g.temp_c, 0) + "</td></tr>";
    }).join("");
  }
  function procRows(snap) {
    $("proc-table").tBodies[0].innerHTML = snap.processes.map(function (p) {
      return '<tr data-pid="' + p.pid + '" data-gpu="' + p.gpu + '"><td>' + p.gpu + "</td><td>" + p.pid +
        "</td><td>" + (p.job_id ? jobLink(p.job_id) : "") + "</td><td>" + esc(p.user) + "</td><td>" + esc(p.name) +
        '</td><td class="num mem">' + num(p.mem_gb, 2) + '</td><td class="num util">' + num(p.util_pct, 0) +
        "</td></tr>";
    }).join("");
    $("proc-empty").hidden = snap.processes.length > 0;
  }
  function lines(series, key) {
    var xs = series.time_s.map(function (t) { return new Date(t * 1000); });
    return series[key].map(function (ys, i) {
      return { type: "scatter", mode: "lines", name: "GPU " + i, x: xs.slice(), y: ys.slice() };
    });
  }
  function node() {
    Promise.all([getJSON("/api/node"), plotlyReady()]).then(function (both) {
      var data = both[0];
      var maxMem = Math.max.apply(null, (data.latest ? data.latest.gpus : []).map(function (g) { return g.mem_total_gb; }).concat([1]));
      Plotly.newPlot("node-util", lines(data.series, "util_pct"), layout({ height: 320, yaxis: { gridcolor: "#2c323c", range: [0, 105] } }), CONFIG);
      Plotly.newPlot("node-mem", lines(data.series, "mem_used_gb"), layout({ height: 320, yaxis: { gridcolor: "#2c323c", range: [0, maxMem * 1.05] } }), CONFIG);
      if (data.latest) { gpuRows(data.latest); procRows(data.latest); }
      var source = new EventSource("/api/node/stream");
      source.onopen = function () { $("live-status").textContent = "connected"; };
      source.onerror = function () { $("live-status").textContent = "reconnecting…"; };
      source.onmessage = function (ev) {
        var snap = JSON.parse(ev.data);
        gpuRows(snap);
        procRows(snap);
        var t = new Date(snap.time_s * 1000);
        var idx = snap.gpus.map(function (_, i) { return i; });
        var keep = Math.max(10, Math.round(data.window_s));
        Plotly.extendTraces("node-util", { x: idx.map(function () { return [t]; }), y: snap.gpus.map(function (g) { return [g.util_pct]; }) }, idx, keep);
        Plotly.extendTraces("node-mem", { x: idx.map(function () { return [t]; }), y: snap.gpus.map(function (g) { return [g.mem_used_gb]; }) }, idx, keep);
        $("last-update").textContent = t.toLocaleTimeString();
        $("origin").textContent = snap.origin === "store" ? "the agent's samples" : "the GPUs directly (no agent sampling)";
      };
      window.gpuplanStream = source;
    });
  }

  // ------------------------------------------------------------------ queue view
  var PAGE = 100;
  function running(r) { return r.state === "running"; }
  function queueTable(offset) {
    var started = performance.now();
    return getJSON("/api/queue?offset=" + offset + "&limit=" + PAGE).then(function (q) {
      $("queue-counts").textContent = q.running + " running, " + q.waiting + " waiting" +
        (q.suspended ? " (" + q.suspended + " suspended)" : "") + (q.note ? " (" + q.note + ")" : "");
      $("queue-error").hidden = !q.error;
      $("queue-error").textContent = q.error || "";
      $("queue-table").tBodies[0].innerHTML = q.rows.map(function (r) {
        var mark = r.estimate_guessed ? " *" : "";
        var times = running(r) ? [r.start_s, r.expected_end_s] : [r.expected_start_s, r.expected_end_s];
        return '<tr data-job="' + esc(r.job_id) + '" data-start="' + times[0] + '" data-end="' + times[1] +
          '" data-reason="' + esc(r.reason || "") + '" class="' + r.state + '"><td class="num">' + r.rank + "</td><td>" +
          jobLink(r.job_id) + "</td><td>" + r.state + "</td><td>" + esc(r.name) + "</td><td>" + esc(r.user) +
          '</td><td class="num">' + r.gpus + '</td><td class="num">' + num(r.mem_gb, 1) + "</td><td>" +
          when(r.submit_s) + "</td><td>" + when(r.expected_start_s) + mark + "</td><td>" + when(r.expected_end_s) + mark + "</td><td>" + esc(r.reason || "") + "</td></tr>";
      }).join("");
      $("queue-empty").hidden = q.total > 0;
      var last = Math.min(q.offset + q.rows.length, q.total);
      $("page-info").textContent = q.total ? "jobs " + (q.offset + 1) + "–" + last + " of " + q.total : "no jobs";
      $("page-prev").disabled = q.offset === 0;
      $("page-next").disabled = last >= q.total;
      $("page-prev").onclick = function () { queueTable(Math.max(0, q.offset - PAGE)); };
      $("page-next").onclick = function () { queueTable(q.offset + PAGE); };
      window.gpuplanQueueMs = performance.now() - started;
    });
  }
  function queue() {
    var t0 = performance.now();
    queueTable(0).then(function () {
      window.gpuplanFirstRenderMs = performance.now() - t0;
      window.gpuplanTableAtMs = performance.now();  // since navigation start
      document.body.dataset.rendered = "table";
      return Promise.all([getJSON("/api/queue/gantt"), plotlyReady()]);  // the table first, then the chart
    }).then(function (both) {
      var g = both[0];
      if (!g.figure) {
        $("queue-gantt-note").textContent = g.error || "Nothing planned: the queue is empty.";
        document.body.dataset.gantt = "empty";
        return;
      }
      $("queue-gantt-note").textContent = "The first " + g.jobs + " planned jobs.";
      Plotly.newPlot("queue-gantt", g.figure.data, g.figure.layout, CONFIG).then(function () {
        document.body.dataset.gantt = "drawn";
      });
    });
  }

  // ------------------------------------------------------------------ Slurm (gpuplan serve --slurm)
  function dur(s) {
    if (s === null || s === undefined) { return "none"; }
    var m = Math.round(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (d > 0) { return d + " d " + (h % 24) + " h"; }
    return h > 0 ? h + " h " + (m % 60) + " min" : m + " min";
  }
  function at(s) {  // time of day; the date too when it is not today
    if (s === null || s === undefined) { return "—"; }
    var d = new Date(s * 1000);
    return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
  }
  function secs(s) { return s === null || s === undefined ? "never (a job has no limit)" : Math.round(s) + " s"; }
  function slurmError(q) {
    var text = q.error || q.plan_error || "";
    $("slurm-error").hidden = !text;
    $("slurm-error").textContent = text;
    $("last-update").textContent = new Date(q.read_s * 1000).toLocaleTimeString();
  }
  function slurmLive(reload) {
    var source = new EventSource("/api/slurm/stream");
    source.onopen = function () { $("live-status").textContent = "connected"; };
    source.onerror = function () { $("live-status").textContent = "reconnecting…"; };
    source.onmessage = function () { reload(); };
    window.gpuplanStream = source;
  }
  function slurmRow(r) {
    var running = r.state === "running";
    var where = running ? r.node_list : (r.unmanaged ? "left alone: " + r.unmanaged : (r.unplanned || r.reason));
    var start = running ? r.start_s : r.expected_start_s;
    var startText = r.planned_rank === null && !running ? "—" : (start === null ? "never" : at(start));
    var endText = (r.expected_end_s === null ? (r.planned_rank !== null || running ? "never" : "—") : at(r.expected_end_s)) +
      (r.estimate === "none" ? " †" : "");
    return '<tr data-job="' + esc(r.job_id) + '" data-state="' + r.state + '" class="' + r.state + '" data-expected-start="' +
      (start === null ? "" : start) + '" data-planned-rank="' + (r.planned_rank === null ? "" : r.planned_rank) +
      '" data-slurm-rank="' + (r.slurm_rank === null ? "" : r.slurm_rank) + '"><td class="num">' + r.rank + "</td><td>" +
      jobLink(r.job_id) + "</td><td>" + esc(running ? "running" : "pending") + "</td><td>" + esc(r.name) + "</td><td>" +
      esc(r.user) + "</td><td>" + esc(r.partition) + '</td><td class="num">' + r.gpus + '</td><td class="num">' +
      dur(r.time_limit_s) + "</td><td>" + esc(where) + "</td><td>" + at(r.submit_s) + "</td><td>" + startText +
      "</td><td>" + endText + '</td><td class="num">' + (r.slurm_rank === null ? "" : r.slurm_rank) + "</td><td>" +
      (r.slurm_rank === null || r.planned_rank === null ? "—" : at(r.slurm_expected_start_s)) + "</td></tr>";
  }
  function slurmSummary(s) {
    $("plan-summary").hidden = !s;
    if (!s) { return; }
    var gain = s.gain.makespan_s === null ? "n/a" : (100 * s.gain.makespan_s).toFixed(1) + " %";
    var gainWait = s.gain.mean_wait_s === null ? "n/a" : (100 * s.gain.mean_wait_s).toFixed(1) + " %";
    $("plan-table").tBodies[0].innerHTML =
      "<tr data-order=\"gpuplan\"><td>gpuplan (" + esc(s.policy) + ')</td><td class="num">' + secs(s.planned.makespan_s) + '</td><td class="num">' + secs(s.planned.mean_wait_s) + "</td></tr>" +
      "<tr data-order=\"slurm\"><td>Slurm's (priority, then job id)</td><td class=\"num\">" + secs(s.slurm_order.makespan_s) + '</td><td class="num">' + secs(s.slurm_order.mean_wait_s) + "</td></tr>" +
      "<tr data-order=\"gain\"><td>gain</td><td class=\"num\">" + gain + '</td><td class="num">' + gainWait + "</td></tr>";
    $("plan-basis").textContent = "Durations from " + s.estimates + "; simulated as backfill=" + s.backfill +
      " (Slurm's SchedulerType) on " + s.cluster + "; partition(s): " + (s.partitions.join(", ") || "none") +
      (s.partitions_given ? "" : " (all)") + ". " + (s.no_limit_jobs.length ? "No time limit, planned as endless: " +
      s.no_limit_jobs.join(", ") + "." : "Every planned job has a time limit.") + (s.note ? " " + s.note + "." : "");
    $("plan-warnings").innerHTML = s.warnings.concat(s.setup_warnings).map(function (w) { return "<li>" + esc(w) + "</li>"; }).join("");
    $("fairness-table").tBodies[0].innerHTML = fairnessRows("user", s.fairness.by_user) + fairnessRows("account", s.fairness.by_account);
  }
  function fairnessRows(by, rows) {
    return rows.map(function (r) {
      var change = r.change_s === null ? "n/a" : (r.change_s > 0 ? "+" : "") + r.change_s.toFixed(0) + " s" +
        (r.change === null ? "" : " (" + (r.change > 0 ? "+" : "") + (100 * r.change).toFixed(0) + " %)");
      return '<tr data-by="' + by + '" data-name="' + esc(r.name) + '" data-change-s="' + (r.change_s === null ? "" : r.change_s) +
        '"><td>' + by + "</td><td>" + esc(r.name) + '</td><td class="num">' + r.jobs + '</td><td class="num">' +
        secs(r.slurm_mean_wait_s) + '</td><td class="num">' + secs(r.plan_mean_wait_s) + '</td><td class="num">' + change + "</td></tr>";
    }).join("");
  }
  function slurmQueue() {
    var offset = 0;
    var t0 = performance.now();
    function load() {
      return getJSON("/api/slurm/queue?offset=" + offset + "&limit=" + PAGE).then(function (q) {
        slurmError(q);
        $("queue-counts").textContent = q.error ? "No jobs shown: Slurm could not be read (above)." :
          q.running + " running, " + q.pending + " pending (" + q.planned + " planned, " + q.unmanaged + " left alone)";
        slurmSummary(q.summary);
        $("slurm-queue-table").tBodies[0].innerHTML = q.rows.map(slurmRow).join("");
        $("queue-empty").hidden = q.total > 0 || !!q.error;
        var last = Math.min(q.offset + q.rows.length, q.total);
        $("page-info").textContent = q.total ? "jobs " + (q.offset + 1) + "–" + last + " of " + q.total : "no jobs";
        $("page-prev").disabled = q.offset === 0;
        $("page-next").disabled = last >= q.total;
        document.body.dataset.version = q.version;
        document.body.dataset.slurm = q.error ? "error" : "ok";
      });
    }
    $("page-prev").onclick = function () { offset = Math.max(0, offset - PAGE); load(); };
    $("page-next").onclick = function () { offset += PAGE; load(); };
    load().then(function () {
      window.gpuplanFirstRenderMs = performance.now() - t0;
      window.gpuplanTableAtMs = performance.now();
      document.body.dataset.rendered = "table";
      slurmLive(load);
    });
  }
  function slurmNode() {
    function load() {
      return Promise.all([getJSON("/api/slurm/nodes"), plotlyReady()]).then(function (both) {
        var d = both[0];
        slurmError(d);
        $("node-counts").textContent = d.error ? "No nodes shown: Slurm could not be read (above)." : d.nodes.length + " nodes, " + d.gpus + " GPUs: " + d.gpus_used + " allocated, " + d.gpus_free + " free";
        $("slurm-node-table").tBodies[0].innerHTML = d.nodes.map(function (n) {
          return '<tr data-node="' + esc(n.name) + '"><td>' + esc(n.name) + "</td><td>" + esc(n.state) + "</td><td>" +
            esc(n.partitions.join(", ")) + '</td><td class="num gpus">' + n.gpus + '</td><td class="num used">' + n.gpus_used +
            '</td><td class="num free">' + n.gpus_free + "</td><td>" + esc(n.jobs.join(", ")) + "</td></tr>";
        }).join("");
        var names = d.nodes.map(function (n) { return n.name; });
        var bars = [
          { type: "bar", name: "allocated", x: names, y: d.nodes.map(function (n) { return n.gpus_used; }) },
          { type: "bar", name: "free", x: names, y: d.nodes.map(function (n) { return n.gpus_free; }) },
        ];
        var lay = layout({ height: 300, barmode: "stack", xaxis: { gridcolor: "#2c323c", type: "category" } });
        return Plotly.react("slurm-alloc", bars, lay, CONFIG).then(function () {
          document.body.dataset.version = d.version;
          document.body.dataset.rendered = "nodes";
        });
      });
    }
    load().then(function () { slurmLive(load); });
  }

  // ------------------------------------------------------------------ job detail
  var JOB_FIELDS = [["state", "State"], ["name", "Name"], ["user", "User"], ["partition", "Partition"],
    ["gpus", "GPUs"], ["gpu_ids", "On GPUs"], ["node_list", "Nodes"], ["mem_gb", "Memory per GPU (GB)"],
    ["time_limit_s", "Time limit"], ["est_duration_s", "Estimate"], ["priority", "Priority"],
    ["after_id", "After job"], ["submit_s", "Submitted"], ["start_s", "Started"], ["end_s", "Ended"],
    ["run_time_s", "Run time"], ["exit_code", "Exit code"], ["reason", "Reason (agent)"],
    ["attempt", "Attempt"], ["preemptions", "Preemptions"]];
  function fieldText(key, v) {
    if (v === null || v === undefined || v === "") { return null; }
    if (/_s$/.test(key) && key !== "time_limit_s" && key !== "est_duration_s" && key !== "run_time_s") { return when(v); }
    if (key === "time_limit_s" || key === "est_duration_s" || key === "run_time_s") { return dur(v) + " (" + Math.round(v) + " s)"; }
    if (Array.isArray(v)) { return v.length ? v.join(", ") : null; }
    return String(v);
  }
  function jobDetail() {
    var id = document.body.dataset.job;
    var token = null;
    function show(d) {
      var j = d.job, f = d.forecast;
      $("job-error").hidden = true;
      $("job-source").textContent = d.source === "agent" ? "from the agent" : d.source === "store" ?
        "the agent is not running: from its store (forecast seeded from it)" : "from Slurm (read-only)";
      $("last-update").textContent = new Date(d.now_s * 1000).toLocaleTimeString();
      document.body.dataset.state = j.state;
      $("job-fields").tBodies[0].innerHTML = JOB_FIELDS.map(function (kv) {
        var text = fieldText(kv[0], j[kv[0]]);
        return text === null ? "" : '<tr data-field="' + kv[0] + '"><th>' + kv[1] + "</th><td>" + esc(text) + "</td></tr>";
      }).join("");
      $("job-forecast").hidden = !f;
      if (f) {
        var waiting = j.state !== "running";
        $("job-reason").textContent = f.reason || (waiting ? "" : "running");
        var start = waiting ? f.expected_start_s : j.start_s;
        $("job-expected-start").dataset.t = start === null || start === undefined ? "" : start;
        $("job-expected-start").textContent = start === null || start === undefined ? "none (it waits behind a job without an end, or is held)" : when(start);
        $("job-expected-end").dataset.t = f.expected_end_s === null || f.expected_end_s === undefined ? "" : f.expected_end_s;
        $("job-expected-end").textContent = when(f.expected_end_s);
        $("job-gpus").textContent = (f.gpu_ids || []).join(", ") || "—";
        $("job-waiting-for").innerHTML = (f.waiting_for || []).map(function (w) {
          return jobLink(String(w.job_id)) + (w.gpus ? " frees " + w.gpus + " GPU(s)" : " ends") +
            (w.at_s === null ? "" : " at " + when(w.at_s)) + (w.basis ? " (its " + esc(w.basis) + ")" : "");
        }).join("; ") || "—";
        $("job-ahead").innerHTML = (f.ahead || []).map(function (a) { return jobLink(String(a)); }).join(", ") || "—";
        $("job-explanation").textContent = f.explanation || "";
      }
      if ($("job-command")) {
        $("job-command").hidden = !d.command_visible;
        $("job-command").textContent = d.command_visible ? j.command + "\n(in " + j.cwd + ")" : "";
        $("job-command-note").textContent = d.command_visible ? "" : d.command_note;
      }
      document.body.dataset.rendered = "job";
    }
    function load() {
      var headers = token ? { Authorization: "Bearer " + token } : {};  // the token is never stored
      return fetch("/api/jobs/" + encodeURIComponent(id), { headers: headers }).then(function (r) {
        return r.json().then(function (body) {
          if (!r.ok) {
            $("job-error").hidden = false;
            $("job-error").textContent = body.detail || r.statusText;
            document.body.dataset.rendered = "error";
            return;
          }
          show(body);
        });
      });
    }
    if ($("job-token-form")) {
      $("job-token-form").addEventListener("submit", function (ev) {
        ev.preventDefault();
        token = $("job-token").value.trim() || null;
        load();
      });
    }
    load();
    window.setInterval(function () { if (!document.hidden) { load(); } }, 5000);
  }

  // ------------------------------------------------------------------ what-if view
  function checked(name) {
    return Array.prototype.filter.call(document.querySelectorAll('input[name="' + name + '"]'), function (c) {
      return c.checked;
    }).map(function (c) { return c.value; }).join(",");
  }
  function showSavings(s) {
    $("savings-caption").textContent = s.baseline ? "Baseline: " + s.baseline + " (first submit to last end, whole cluster held)." : "No FIFO run to compare with.";
    $("savings-table").tBodies[0].innerHTML = s.rows.map(function (r) {
      return "<tr><td>" + esc(r.label) + "</td><td>" + esc(r.placer) + '</td><td class="num">' + num(r.gpu_hours_saved, 1) +
        '</td><td class="num">' + num(r.usd_saved, 0) + '</td><td class="num">' + num(r.kwh_saved, 1) + "</td></tr>";
    }).join("");
    $("savings-costs").textContent = Object.keys(s.costs).map(function (m) {
      var c = s.costs[m];
      return m + ": " + (c.usd_per_h === null ? "no price" : "$" + c.usd_per_h + "/GPU-h") + ", " + c.busy_w + " W busy, " + c.idle_w + " W idle (" + c.source + ")";
    }).join("; ");
  }
  function showGantt(key, run) {
    $("whatif-gantt-note").textContent = "drawing…";
    return getJSON("/api/whatif/" + key + "/gantt/" + run).then(function (g) {
      $("whatif-gantt-note").textContent = g.label + ": " + g.records + " jobs";
      return Plotly.react("whatif-gantt", g.figure.data, g.figure.layout, CONFIG);
    });
  }
  function showResult(res) {
    $("whatif-result").hidden = false;
    $("whatif-caption").textContent = res.trace.source + " (" + res.trace.format + ", " + res.trace.jobs + " jobs) on " + res.cluster.describe;
    $("whatif-notes").innerHTML = res.notes.map(function (n) { return "<li>" + esc(n) + "</li>"; }).join("");
    $("whatif-table").innerHTML = res.summary_html;  // rendered and escaped by gpuplan.report.html
    showSavings(res.savings);
    var select = $("whatif-gantt-select");
    select.innerHTML = res.data.runs.map(function (r, i) {
      return '<option value="' + i + '"' + (i === res.best ? " selected" : "") + ">" + esc(r.label) + "</option>";
    }).join("");
    select.onchange = function () { showGantt(res.id, select.value); };
    return Promise.all([
      Plotly.react("whatif-compare", res.figures.compare.data, res.figures.compare.layout, CONFIG),
      Plotly.react("whatif-util", res.figures.util.data, res.figures.util.layout, CONFIG),
      showGantt(res.id, res.best),
    ]);
  }
  function whatif() {
    $("whatif-form").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var file = $("wf-file").files[0];
      var params = new URLSearchParams({
        cluster: $("wf-cluster").value, placer: $("wf-placer").value,
        policies: checked("policy"), backfills: checked("backfill"),
        oracle: $("wf-oracle").checked, skip_bad: $("wf-skip-bad").checked,
        prices: $("wf-prices").value, watts: $("wf-watts").value,
        path: file ? "" : $("wf-path").value, name: file ? file.name : "",
      });
      $("wf-status").textContent = "simulating…";
      $("whatif-error").hidden = true;
      document.body.dataset.whatif = "running";
      var headers = {};  // uploads need the server's token; it is never stored by the page
      if (file && $("wf-token").value) { headers.Authorization = "Bearer " + $("wf-token").value.trim(); }
      fetch("/api/whatif?" + params.toString(), { method: "POST", body: file || null, headers: headers })
        .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); })
        .then(function (res) {
          $("wf-status").textContent = "";
          if (!res.ok) {
            $("whatif-result").hidden = true;
            $("whatif-error").hidden = false;
            $("whatif-error").textContent = res.body.error || res.body.detail || "the what-if failed";
            document.body.dataset.whatif = "error";
            return;
          }
          return plotlyReady().then(function () { return showResult(res.body); }).then(function () { document.body.dataset.whatif = "done"; });
        });
    });
  }

  var view = document.body.dataset.view;
  var views = { node: node, queue: queue, whatif: whatif, job: jobDetail, "slurm-node": slurmNode, "slurm-queue": slurmQueue };
  if (views[view]) { views[view](); }
})();
