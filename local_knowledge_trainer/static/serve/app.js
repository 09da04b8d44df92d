// The LKT search page: static, no framework, no network but this server. Every text from the base is set with
// textContent (never innerHTML), so a document cannot inject markup into the page.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(0) + " %");
  let writable = false;   // GET /health: may this page send feedback (a write)?
  let asked = null;       // {question, k, mode} of the results shown, for the "found / not found" feedback

  async function call(path, body) {
    const opts = body === undefined ? {} : {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
    const r = await fetch(path, opts);
    let data = null;
    try { data = await r.json(); } catch (e) { data = {error: `the server answered ${r.status} without JSON`, fix: "check the server's log"}; }
    if (!r.ok) { const err = new Error(data.error || `HTTP ${r.status}`); err.fix = data.fix || ""; err.status = r.status; throw err; }
    return data;
  }

  function showError(err) {
    $("error").hidden = false;
    $("error-text").textContent = err.message;
    $("error-fix").textContent = err.fix ? "Fix: " + err.fix : "";
  }

  function clear() {
    $("error").hidden = true; $("answer").hidden = true; $("confidence").hidden = true; $("trace-box").hidden = true;
    $("results").replaceChildren(); $("feedback").hidden = true; $("feedback-status").textContent = "";
  }

  function location(r) {
    const parts = [];
    if (r.page !== null && r.page !== undefined) parts.push("p. " + r.page);
    if (r.section) parts.push("§ " + r.section);
    return parts.join(" · ");
  }

  async function showNeighbours(box, id, button) {
    button.disabled = true;
    try {
      const data = await call("neighbours/" + encodeURIComponent(id) + "?window=1");
      box.replaceChildren();
      for (const c of data.chunks) {
        const n = el("div", "neighbour" + (c.id === id ? " centre" : ""), c.text);
        n.title = c.id + (c.id === id ? " (this result)" : "");
        box.appendChild(n);
      }
      button.hidden = true;
    } catch (err) { showError(err); button.disabled = false; }
  }

  function renderConfidence(data) {
    if (data.confidence === undefined) return;
    const box = $("confidence");
    box.replaceChildren();
    box.className = data.abstained ? "low" : "";
    box.appendChild(el("strong", null, "Confidence " + pct(data.confidence)));
    const meter = el("span", "meter"); const bar = el("span");
    bar.style.width = Math.max(0, Math.min(100, 100 * (data.confidence || 0))).toFixed(0) + "%";
    meter.appendChild(bar); box.appendChild(meter);
    const bits = [];
    if (data.ci_lower !== undefined) bits.push(`95 % CI ${pct(data.ci_lower)} – ${pct(data.ci_upper)}`);
    if (data.p_value !== undefined && data.p_value !== null) bits.push("p = " + Number(data.p_value).toPrecision(2));
    if (data.confidence_method) bits.push(data.confidence_method);
    box.appendChild(el("span", "muted", bits.join(" · ")));
    if (data.abstained) box.appendChild(el("p", null, "The evidence is weak: the base may not hold the answer."));
    box.hidden = false;
  }

  function render(data, withAnswer) {
    clear();
    if (withAnswer) { $("answer-text").textContent = data.text; $("answer").hidden = false; }
    renderConfidence(data);
    const list = $("results");
    data.results.forEach((r, i) => {
      const c = (data.citations || [])[i] || {};
      const li = el("li", "result citation");
      li.dataset.id = r.id;
      const head = el("div", "head");
      head.appendChild(el("span", "rank", "[" + r.rank + "]"));
      head.appendChild(el("span", "source", r.source));
      const where = location(r);
      if (where) head.appendChild(el("span", "where", where));
      head.appendChild(el("span", "score", "score " + Number(r.score).toFixed(4)));
      li.appendChild(head);
      li.appendChild(el("blockquote", "quote", c.quote || r.text.slice(0, 300)));
      const full = el("details"); full.appendChild(el("summary", null, "whole chunk")); full.appendChild(el("pre", null, r.text));
      li.appendChild(full);
      const nb = el("div", "neighbours");
      nb.appendChild(el("span", null, "neighbours: " + (r.prev_id ? "← " + r.prev_id : "(first)") + "  " + (r.next_id ? r.next_id + " →" : "(last)")));
      if (r.prev_id || r.next_id) {
        const b = el("button", "secondary", "show"); b.type = "button";
        const box = el("div", "neighbour-box");
        b.addEventListener("click", () => showNeighbours(box, r.id, b));
        nb.appendChild(b); nb.appendChild(box);
      }
      li.appendChild(nb);
      list.appendChild(li);
    });
    if (data.trace) { $("trace-json").textContent = JSON.stringify(data.trace, null, 2); $("trace-box").hidden = false; }
    $("status").textContent = data.results.length ? `${data.results.length} result(s) for “${data.question}” (${data.mode})` : "no evidence found";
    if (writable && data.results.length) {
      for (const b of [$("found-btn"), $("not-found-btn")]) b.disabled = false;
      $("feedback").hidden = false;
    }
  }

  // "found / not found": a labelled question for the answer-confidence model (POST /feedback, a write)
  async function sendFeedback(found) {
    if (!asked) return;
    for (const b of [$("found-btn"), $("not-found-btn")]) b.disabled = true;
    $("feedback-status").textContent = "sending…";
    try {
      const r = await call("feedback", {question: asked.question, found, k: asked.k, mode: asked.mode});
      $("feedback-status").textContent = `recorded (${r.total} labelled question(s)) · ${r.state}`;
    } catch (err) {
      $("feedback-status").textContent = ""; showError(err);
      for (const b of [$("found-btn"), $("not-found-btn")]) b.disabled = false;
    }
  }

  async function ask(withAnswer) {
    const question = $("question").value;
    if (!question.trim()) { showError({message: "type a question first", fix: ""}); return; }
    const body = {question, k: parseInt($("k").value, 10) || 5, mode: $("mode").value, trace: $("trace").checked};
    for (const b of [$("search-btn"), $("answer-btn")]) b.disabled = true;
    $("status").textContent = withAnswer ? "answering…" : "searching…";
    try { render(await call(withAnswer ? "answer" : "search", body), withAnswer); asked = {question, k: body.k, mode: body.mode}; }
    catch (err) { clear(); $("status").textContent = ""; showError(err); }
    finally { for (const b of [$("search-btn"), $("answer-btn")]) b.disabled = false; }
  }

  $("ask").addEventListener("submit", (e) => { e.preventDefault(); ask(false); });
  $("answer-btn").addEventListener("click", () => ask(true));
  $("found-btn").addEventListener("click", () => sendFeedback(true));
  $("not-found-btn").addEventListener("click", () => sendFeedback(false));
  $("question").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); ask(false); } });
  call("health").then((h) => {
    $("base-info").textContent = `${h.documents} documents · ${h.chunks} chunks · ${h.embedding_model} · generation ${h.generation}`;
    writable = h.read_only === false;
  }).catch((err) => { $("base-info").textContent = ""; showError(err); });
})();
