"""The HTML, style and script of the run report page (:mod:`agents.evaluation.report`), as one template.

``%%TITLE%%`` takes the HTML-escaped title and ``%%DATA%%`` the escaped JSON blob. The script reads the
blob with ``JSON.parse`` and builds every element with ``createElement`` and ``textContent`` (never
``innerHTML``): text from a transcript is always shown as text. The Content-Security-Policy allows inline
style and script and ``data:`` pictures only, so the page loads nothing from anywhere.
"""

from __future__ import annotations

_STYLE = """
:root { --fg:#1d2327; --muted:#6b7680; --line:#d8dee4; --ok:#1a7f37; --bad:#cf222e; --warn:#9a6700;
        --bg2:#f6f8fa; --gold:#fff4c2; --accent:#0969da; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); margin: 0 auto;
       padding: 16px 24px 48px; max-width: 1500px; }
h1 { font-size: 20px; margin: 0 0 12px; } h2 { font-size: 16px; margin: 24px 0 8px; }
table.results { border-collapse: collapse; font-variant-numeric: tabular-nums; }
table.results th, table.results td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: right;
       white-space: nowrap; }
table.results th { cursor: pointer; user-select: none; background: var(--bg2); position: sticky; top: 0; }
table.results th.sorted-asc::after { content: " \\25B2"; } table.results th.sorted-desc::after { content: " \\25BC"; }
table.results td.txt, table.results th.txt { text-align: left; }
.ci { color: var(--muted); font-size: 12px; }
.wrap { overflow-x: auto; }
.controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin: 8px 0; padding: 8px;
            background: var(--bg2); border: 1px solid var(--line); border-radius: 6px; }
.controls input[type=search] { min-width: 260px; padding: 4px 6px; }
.pager { display: flex; gap: 8px; align-items: center; margin: 8px 0; }
.group { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; }
.group > .head { display: flex; gap: 10px; align-items: baseline; padding: 6px 10px; cursor: pointer;
                 flex-wrap: wrap; }
.group > .head:hover { background: var(--bg2); }
.qid { color: var(--muted); font-size: 12px; font-family: ui-monospace, monospace; }
.question { font-weight: 600; flex: 1 1 400px; white-space: pre-wrap; overflow-wrap: anywhere; }
.badge { display: inline-block; margin-left: 4px; padding: 0 6px; border-radius: 10px; font-size: 12px;
         border: 1px solid var(--line); white-space: nowrap; }
.badge.ok { color: var(--ok); border-color: var(--ok); } .badge.bad { color: var(--bad); border-color: var(--bad); }
.badge.warn { color: var(--warn); border-color: var(--warn); }
.side { display: grid; gap: 10px; padding: 8px 10px 10px; overflow-x: auto; }
.episode { border: 1px solid var(--line); border-radius: 6px; padding: 8px; min-width: 320px; background: #fff; }
.episode h3 { font-size: 14px; margin: 0 0 6px; }
.turn { border-top: 1px dashed var(--line); padding: 6px 0; }
.turn .title { font-weight: 600; font-size: 13px; }
.think { color: var(--muted); font-style: italic; white-space: pre-wrap; overflow-wrap: anywhere; margin: 4px 0; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: var(--bg2); padding: 6px; border-radius: 4px;
      margin: 4px 0; font-size: 12px; max-height: 320px; overflow-y: auto; }
.query { font-family: ui-monospace, monospace; font-size: 12px; }
.doc { border-left: 3px solid var(--line); padding: 2px 6px; margin: 4px 0; font-size: 12px; white-space: pre-wrap;
       overflow-wrap: anywhere; }
.doc.gold { border-left-color: #d4a72c; background: var(--gold); }
.doc .dtitle { font-weight: 600; } .doc .cut { color: var(--bad); font-style: italic; }
.terms { font-size: 12px; color: var(--muted); font-family: ui-monospace, monospace; }
.final { margin-top: 6px; padding-top: 6px; border-top: 1px solid var(--line); }
.label { font-weight: 600; } .muted { color: var(--muted); }
.err { color: var(--bad); white-space: pre-wrap; overflow-wrap: anywhere; }
img.curves { max-width: 100%; border: 1px solid var(--line); }
table.settings { border-collapse: collapse; font-size: 12px; }
table.settings th, table.settings td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left;
       vertical-align: top; }
table.settings th { font-weight: 600; white-space: nowrap; font-family: ui-monospace, monospace; }
table.settings td { font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
table.settings tr.comparable th { color: var(--accent); }
"""

_SCRIPT = r"""
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const PAGE_SIZE = 25;
  const runs = Array.isArray(DATA.runs) ? DATA.runs : [];
  const rows = Array.isArray(DATA.rows) ? DATA.rows : [];
  const columns = Array.isArray(DATA.columns) ? DATA.columns : [];

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }
  function fmt(v, f) {
    if (v === null || v === undefined) return "-";
    if (typeof v !== "number") return String(v);
    const m = /\{:\.(\d+)f\}/.exec(f || "");
    return m ? v.toFixed(Number(m[1])) : String(v);
  }
  function runLabel(run) {
    return typeof run.label === "string" ? run.label : String(run.agent) + " / " + String(run.retriever);
  }
  const labelColumns = Array.isArray(DATA.label_columns) ? DATA.label_columns : [["agent", "Agent"],
    ["retriever", "Retriever"]];

  // ---- results table ----------------------------------------------------------------------------------
  function interval(row, key) {
    let ci = row[key + "_ci"];
    if (!ci && row.intervals && typeof row.intervals === "object") ci = row.intervals[key];
    if (Array.isArray(ci) && ci.length === 2 && num(ci[0]) !== null && num(ci[1]) !== null) return ci;
    return null;
  }
  function buildTable(host) {
    if (!rows.length) return;
    add(host, el("h2", null, "Results"));
    const wrap = add(host, el("div", "wrap"));
    const table = add(wrap, el("table", "results"));
    const cols = labelColumns.map(function (c) { return [c[0], c[1], null, true]; })
      .concat([["n", "n", "{}", false]], columns.map(function (c) { return [c[0], c[1], c[2], false]; }));
    const thead = add(table, el("thead"));
    const hr = add(thead, el("tr"));
    const tbody = add(table, el("tbody"));
    let order = rows.map(function (_, i) { return i; });
    let sortKey = null, sortDir = 1;
    function fill() {
      tbody.textContent = "";
      order.forEach(function (i) {
        const row = rows[i];
        const tr = add(tbody, el("tr"));
        cols.forEach(function (c) {
          const td = add(tr, el("td", c[3] ? "txt" : null, c[3] ? row[c[0]] : fmt(row[c[0]], c[2])));
          const ci = c[3] ? null : interval(row, c[0]);
          if (ci) add(td, el("span", "ci", " [" + fmt(ci[0], c[2]) + ", " + fmt(ci[1], c[2]) + "]"));
        });
      });
    }
    cols.forEach(function (c) {
      const th = add(hr, el("th", c[3] ? "txt" : null, c[1]));
      th.title = "sort by " + c[1];
      th.addEventListener("click", function () {
        sortDir = sortKey === c[0] ? -sortDir : (c[3] ? 1 : -1);
        sortKey = c[0];
        order.sort(function (a, b) {
          const x = rows[a][c[0]], y = rows[b][c[0]];
          if (x === y) return a - b;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          return (x < y ? -1 : 1) * sortDir;
        });
        Array.prototype.forEach.call(hr.children, function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(sortDir > 0 ? "sorted-asc" : "sorted-desc");
        fill();
      });
    });
    fill();
  }

  // ---- episodes ---------------------------------------------------------------------------------------
  function flags(rec) {
    const m = rec.metrics && typeof rec.metrics === "object" ? rec.metrics : {};
    const steps = Array.isArray(rec.steps) ? rec.steps : [];
    const failed = rec.error !== undefined && rec.error !== null;
    return {
      wrong: failed || !(num(m.em) !== null && m.em >= 1),
      invalid: (num(m.invalid_turns) || 0) > 0 || steps.some(function (s) { return s && s.invalid_reason; }),
      infra: failed || (num(m.infra_errors) || 0) > 0 || steps.some(function (s) { return s && s.infra_error; }),
    };
  }
  const groups = [];
  const byId = new Map();
  runs.forEach(function (run, ri) {
    (Array.isArray(run.episodes) ? run.episodes : []).forEach(function (rec) {
      const id = String(rec.example_id);
      const key = (typeof run.scope === "string" ? run.scope : "") + "\u0000" + id;  // a bench set's own ids
      let g = byId.get(key);
      if (!g) {
        g = { id: id, question: String(rec.question), search: (id + "\n" + rec.question).toLowerCase(), eps: [] };
        byId.set(key, g);
        groups.push(g);
      }
      g.eps.push({ run: ri, rec: rec, flags: flags(rec) });
    });
  });

  function thinking(text) {
    const out = [];
    const re = /<think>([\s\S]*?)(?:<\/think>|$)/g;
    let m;
    while ((m = re.exec(text)) !== null) { if (m[1].trim()) out.push(m[1].trim()); }
    return out;
  }
  function parseDocs(text) {
    const re = /(^|\n|<information>|<tool_response>\n?)Doc (\d+)\(Title: ([^\n]*?)\) /g;
    const marks = [];
    let m;
    while ((m = re.exec(text)) !== null) {
      marks.push({ at: m.index + m[1].length, end: re.lastIndex, n: m[2], title: m[3] });
    }
    return marks.map(function (mk, i) {
      let body = text.slice(mk.end, i + 1 < marks.length ? marks[i + 1].at : text.length);
      const close = body.search(/<\/(information|tool_response)>/);
      if (close >= 0) body = body.slice(0, close);
      return { n: mk.n, title: mk.title, text: body.replace(/\s+$/, "") };
    });
  }
  function renderDocs(host, obs, step, rec, maxChars) {
    const docs = parseDocs(obs);
    const ids = Array.isArray(step.doc_ids) ? step.doc_ids : [];
    const gold = new Set(Array.isArray(rec.evidence_ids) ? rec.evidence_ids.map(String) : []);
    docs.forEach(function (d, k) {
      const id = k < ids.length ? String(ids[k]) : null;
      const isGold = id !== null && gold.has(id);
      const box = add(host, el("div", "doc" + (isGold ? " gold" : "")));
      add(box, el("span", "dtitle", "Doc " + d.n + " (" + d.title + ")"));
      if (id !== null) add(box, el("span", "qid", "  " + id));
      if (isGold) add(box, el("span", "badge ok", "gold evidence"));
      add(box, el("div", null, d.text));
      if (num(maxChars) !== null && d.text.length >= maxChars) {
        add(box, el("div", "cut", "\u2026 cut here: the agent saw the first " + maxChars +
          " characters (max_doc_chars)"));
      }
    });
    const raw = add(host, el("details"));
    add(raw, el("summary", "muted", docs.length ? "observation as the agent saw it" : "observation"));
    add(raw, el("pre", null, obs));
    if (!docs.length) raw.open = true;
  }
  function renderTerms(host, step) {
    const terms = step.reward_terms && typeof step.reward_terms === "object" ? step.reward_terms : {};
    const parts = Object.keys(terms).map(function (k) { return k + " " + fmt(terms[k], "{:.3f}"); });
    if (num(step.reward) !== null) parts.unshift("reward " + fmt(step.reward, "{:.3f}"));
    if (parts.length) add(host, el("div", "terms", parts.join(" \u00b7 ")));
  }
  function renderEpisode(ep) {
    const rec = ep.rec, run = runs[ep.run];
    const box = el("div", "episode");
    add(box, el("h3", null, runLabel(run)));
    const messages = Array.isArray(rec.messages) ? rec.messages : [];
    const steps = Array.isArray(rec.steps) ? rec.steps : [];
    const system = messages.filter(function (m) { return m && m.role === "system"; });
    if (system.length) {
      const d = add(box, el("details"));
      add(d, el("summary", "muted", "system prompt"));
      add(d, el("pre", null, system[0].content));
    }
    let t = 0;
    messages.forEach(function (msg, i) {
      if (!msg || msg.role !== "assistant") return;
      const step = steps[t] && typeof steps[t] === "object" ? steps[t] : {};
      t += 1;
      const turn = add(box, el("div", "turn"));
      const title = add(turn, el("div", "title", "Turn " + (step.turn !== undefined ? step.turn : t) +
        (step.action_type ? " \u00b7 " + step.action_type : "")));
      if (step.invalid_reason) add(title, el("span", "badge warn", "invalid: " + step.invalid_reason));
      if (step.infra_error) add(title, el("span", "badge bad", "infrastructure error"));
      const content = String(msg.content === undefined || msg.content === null ? "" : msg.content);
      thinking(content).forEach(function (th) { add(turn, el("div", "think", th)); });
      const out = add(turn, el("details"));
      add(out, el("summary", "muted", "model output"));
      add(out, el("pre", null, content));
      (Array.isArray(step.queries) ? step.queries : []).forEach(function (q) {
        add(turn, el("div", "query", "\u2315 " + q));
      });
      const next = messages[i + 1];
      if (next && next.role !== "assistant" && next.role !== "system") {
        renderDocs(turn, String(next.content === undefined || next.content === null ? "" : next.content), step, rec,
          run.max_doc_chars);
      }
      renderTerms(turn, step);
    });
    const fin = add(box, el("div", "final"));
    if (rec.error !== undefined && rec.error !== null) add(fin, el("div", "err", "episode failed: " + rec.error));
    const m = rec.metrics && typeof rec.metrics === "object" ? rec.metrics : {};
    const ans = add(fin, el("div"));
    add(ans, el("span", "label", "Answer: "));
    add(ans, el("span", null, rec.answer === null || rec.answer === undefined ? "(none)" : rec.answer));
    add(ans, el("span", ep.flags.wrong ? "badge bad" : "badge ok",
      "EM " + fmt(m.em, "{:.0f}") + " \u00b7 F1 " + fmt(m.f1, "{:.2f}")));
    const gold = add(fin, el("div"));
    add(gold, el("span", "label", "Gold: "));
    add(gold, el("span", null, (Array.isArray(rec.gold) ? rec.gold : []).join(" | ")));
    if (num(m.return) !== null) add(fin, el("div", "terms", "return " + fmt(m.return, "{:.3f}")));
    return box;
  }

  function buildEpisodes(host) {
    if (!groups.length) return;
    add(host, el("h2", null, "Episodes"));
    const ctl = add(host, el("div", "controls"));
    const search = add(ctl, el("input"));
    search.type = "search"; search.placeholder = "search questions and ids"; search.id = "search";
    const boxes = {};
    const kinds = [["wrong", "wrong answers"], ["invalid", "invalid turns"], ["infra", "infrastructure errors"]];
    kinds.forEach(function (f) {
      const lab = add(ctl, el("label"));
      const cb = add(lab, el("input"));
      cb.type = "checkbox"; cb.id = "filter-" + f[0];
      add(lab, document.createTextNode(" " + f[1]));
      boxes[f[0]] = cb;
    });
    const pick = add(ctl, el("select"));
    pick.id = "filter-run";
    add(pick, el("option", null, "any agent")).value = "-1";
    runs.forEach(function (run, ri) { add(pick, el("option", null, runLabel(run))).value = String(ri); });
    const pager = add(host, el("div", "pager"));
    const prev = add(pager, el("button", null, "\u2190 previous"));
    const info = add(pager, el("span", "muted"));
    info.id = "page-info";
    const next = add(pager, el("button", null, "next \u2192"));
    const list = add(host, el("div"));
    list.id = "episodes";
    let shown = groups, page = 0;

    function matches(g) {
      const q = search.value.trim().toLowerCase();
      if (q && g.search.indexOf(q) < 0) return false;
      const want = Object.keys(boxes).filter(function (k) { return boxes[k].checked; });
      if (!want.length) return true;
      const ri = Number(pick.value);
      return g.eps.some(function (ep) {
        return (ri < 0 || ep.run === ri) && want.every(function (k) { return ep.flags[k]; });
      });
    }
    function draw() {
      list.textContent = "";
      const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
      page = Math.min(page, pages - 1);
      info.textContent = "page " + (page + 1) + " of " + pages + " \u00b7 " + shown.length + " of " + groups.length +
        " questions";
      prev.disabled = page === 0; next.disabled = page >= pages - 1;
      shown.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).forEach(function (g) {
        const card = add(list, el("div", "group"));
        card.dataset.id = g.id;
        const head = add(card, el("div", "head"));
        add(head, el("span", "qid", g.id));
        add(head, el("span", "question", g.question));
        g.eps.forEach(function (ep) {
          const f = ep.flags;
          const label = runLabel(runs[ep.run]) + (f.wrong ? " \u2717" : " \u2713") + (f.invalid ? " invalid" : "") +
            (f.infra ? " infra" : "");
          add(head, el("span", "badge " + (f.infra ? "warn" : f.wrong ? "bad" : "ok"), label));
        });
        head.tabIndex = 0;
        head.setAttribute("role", "button");
        head.setAttribute("aria-expanded", "false");
        head.addEventListener("keydown", function (ev) {
          if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); head.click(); }
        });
        let body = null;
        head.addEventListener("click", function () {
          head.setAttribute("aria-expanded", body ? "false" : "true");
          if (body) { body.remove(); body = null; card.classList.remove("open"); return; }
          body = add(card, el("div", "side"));
          body.style.gridTemplateColumns = "repeat(" + g.eps.length + ", minmax(320px, 1fr))";
          g.eps.forEach(function (ep) { add(body, renderEpisode(ep)); });
          card.classList.add("open");
        });
      });
    }
    function refilter() { shown = groups.filter(matches); page = 0; draw(); }
    search.addEventListener("input", refilter);
    pick.addEventListener("change", refilter);
    Object.keys(boxes).forEach(function (k) { boxes[k].addEventListener("change", refilter); });
    prev.addEventListener("click", function () { page = Math.max(0, page - 1); draw(); });
    next.addEventListener("click", function () { page += 1; draw(); });
    draw();
  }

  function buildSettings(host) {
    const settings = DATA.settings;
    if (!settings || typeof settings !== "object" || Array.isArray(settings)) return;
    add(host, el("h2", null, "Settings"));
    if (typeof DATA.description === "string") add(host, el("p", "muted", DATA.description));
    const comparable = new Set(Array.isArray(DATA.comparable) ? DATA.comparable.map(String) : []);
    if (comparable.size) {
      add(host, el("p", "muted", "Marked \u2605: the settings in which two cards must agree for their numbers to " +
        "be comparable (searchenv compare-cards names those that differ)."));
    }
    const wrap = add(host, el("div", "wrap"));
    const table = add(wrap, el("table", "settings"));
    const body = add(table, el("tbody"));
    Object.keys(settings).forEach(function (k) {
      const tr = add(body, el("tr", comparable.has(k) ? "comparable" : null));
      add(tr, el("th", null, (comparable.has(k) ? "\u2605 " : "") + k));
      const v = settings[k];
      add(tr, el("td", null, typeof v === "string" ? v : JSON.stringify(v)));
    });
  }

  function buildCurves(host) {
    if (typeof DATA.curves !== "string" || DATA.curves.indexOf("data:image/png;base64,") !== 0) return;
    add(host, el("h2", null, "Learning curves"));
    const img = add(host, el("img", "curves"));
    img.alt = "learning curves";
    img.src = DATA.curves;
  }

  const root = document.getElementById("report");
  add(root, el("h1", null, String(DATA.title || "run report")));
  buildTable(root);
  buildSettings(root);
  buildCurves(root);
  buildEpisodes(root);
  document.body.dataset.ready = "1";
})();
"""

#: The page, with ``%%TITLE%%`` and ``%%DATA%%`` to fill (:func:`agents.evaluation.report.render`).
PAGE = (
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; img-src data:\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<link rel=\"icon\" href=\"data:,\">\n"
    "<title>%%TITLE%%</title>\n<style>" + _STYLE + "</style>\n</head>\n<body>\n<main id=\"report\"></main>\n"
    "<noscript>This page draws its tables and episodes with JavaScript.</noscript>\n"
    "<script type=\"application/json\" id=\"report-data\">%%DATA%%</script>\n"
    "<script>" + _SCRIPT + "</script>\n</body>\n</html>\n"
)
