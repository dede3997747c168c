// gigpo-gym inspect: draws the page from the inline JSON; no network, no library.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("inspect-data").textContent);
  const controls = document.getElementById("controls");
  const summary = document.getElementById("summary");
  const view = document.getElementById("view");

  // An element with attributes and children (strings become text: data never becomes markup).
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "style") Object.assign(node.style, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
  }

  function num(x, digits) {
    if (x === null || x === undefined) return "-";
    const d = digits === undefined ? 2 : digits;
    return (x > 0 ? "+" : "") + Number(x).toFixed(d);
  }

  function select(label, id, options, value, onChange) {
    const box = el("select", { id: id, onchange: (e) => onChange(e.target.value) },
      options.map(([v, text]) => el("option", { value: v, selected: String(v) === String(value) }, text)));
    return el("label", {}, label + " ", box);
  }

  // Green for a positive advantage, orange-red for a negative one, stronger the larger |value| / scale.
  function shade(value, scale) {
    if (value === null || value === undefined || !(scale > 0)) return "";
    const alpha = (Math.min(Math.abs(value) / scale, 1) * 0.6).toFixed(3);
    return value >= 0 ? `rgba(0, 158, 115, ${alpha})` : `rgba(213, 94, 0, ${alpha})`;
  }

  function groupColour(code) {
    return `hsl(${Math.round((code * 137.508) % 360)}, 62%, 42%)`;
  }

  function outcomeOf(episodes) {
    const won = episodes.filter((e) => e.won).length;
    return won === 0 ? "none" : won === episodes.length ? "all" : "mixed";
  }

  const OUTCOMES = [["any", "any"], ["mixed", "some won, some not"], ["all", "all won"], ["none", "none won"]];

  // -- a training run -------------------------------------------------------------------
  const state = { iteration: DATA.initial, type: "any", outcome: "any", colour: "step", pinned: null };

  function renderRun() {
    const record = DATA.records[String(state.iteration)];
    const hasStep = record.groups.some((g) => g.episodes.some((e) => e.steps.some((s) => s.adv_s !== null)));
    if (!hasStep) state.colour = "adv";
    const types = [...new Set(record.groups.map((g) => g.task_type))].sort();
    if (state.type !== "any" && !types.includes(state.type)) state.type = "any";
    controls.replaceChildren(
      select("iteration", "pick-iteration", Object.keys(DATA.records).map((k) => [k, k]), state.iteration,
        (v) => { state.iteration = Number(v); state.pinned = null; renderRun(); }),
      select("task type", "pick-type", [["any", "any"], ...types.map((t) => [t, t])], state.type,
        (v) => { state.type = v; renderRun(); }),
      select("outcome", "pick-outcome", OUTCOMES, state.outcome, (v) => { state.outcome = v; renderRun(); }),
      select("colour by", "pick-colour",
        (hasStep ? [["step", "step advantage A^S"]] : []).concat([["adv", "advantage A (estimator)"]]), state.colour,
        (v) => { state.colour = v; renderRun(); }),
      el("span", {}, el("span", { class: "legend-box", style: { background: shade(1, 1) } }), " positive ",
        el("span", { class: "legend-box", style: { background: shade(-1, 1) } }), " negative; ",
        el("span", { class: "mark", style: { background: groupColour(3) } }, "g3 x4"),
        "same state in one task group (hover or click)")
    );
    const b = record.batch;
    const pct = (x) => (x === null || x === undefined ? "-" : (100 * x).toFixed(1) + "%");
    summary.replaceChildren(
      el("span", { class: "stat" }, `${DATA.algo.name} (${DATA.source}), iteration ${state.iteration}: ` +
        `${b.rows} steps, ${b.trajectories} episodes, ${b.task_groups} task groups`),
      el("span", { class: "stat" }, `steps in groups of >= 2: ${pct(b.rows_in_shared_groups)}`),
      el("span", { class: "stat" }, `mean group size ${b.step_group_size_mean === null ? "-" : b.step_group_size_mean.toFixed(2)}`),
      el("span", { class: "stat" }, `groups of >= 2 differing in outcome: ${pct(b.shared_groups_differing_outcome)}`),
      el("span", { class: "stat" }, `steps with A^S != 0: ${pct(b.rows_nonzero_step_advantage)}, A^E != 0: ${pct(b.rows_nonzero_episode_advantage)}`),
      el("span", { class: "stat" }, `mean |A^S| ${num(b.mean_abs_step_advantage, 3)}, |A^E| ${num(b.mean_abs_episode_advantage, 3)}`),
      el("span", { class: "stat" }, `success ${pct(b.success.all)}`),
      el("span", { class: "stat" }, `groups: ${record.grouping === "estimator" ? "the estimator's" : "equal anchors (the estimator has none)"}`)
    );
    const key = state.colour === "step" ? "adv_s" : "adv";
    let scale = 0;
    for (const g of record.groups) for (const e of g.episodes) for (const s of e.steps)
      if (s[key] !== null) scale = Math.max(scale, Math.abs(s[key]));
    const shown = record.groups.filter((g) => (state.type === "any" || g.task_type === state.type) &&
      (state.outcome === "any" || outcomeOf(g.episodes) === state.outcome));
    view.replaceChildren(...(shown.length ? shown.map((g) => renderGroup(record, g, key, scale))
      : [el("p", { class: "empty" }, "No recorded task group of this iteration passes the filters.")]));
  }

  function light(table, code, on) {
    for (const cell of table.querySelectorAll(`td.cell[data-g="${code}"]`)) cell.classList.toggle("lit", on);
  }

  function pin(code) {
    state.pinned = state.pinned === code ? null : code;
    for (const cell of view.querySelectorAll("td.cell")) cell.classList.toggle("pinned", cell.dataset.g === state.pinned);
  }

  function renderGroup(record, group, key, scale) {
    const texts = record.texts;
    const won = group.episodes.filter((e) => e.won).length;
    const length = Math.max(0, ...group.episodes.map((e) => Math.max(-1, ...e.steps.map((s) => s.t)) + 1));
    const head = el("tr", {}, el("th", { class: "t" }, "step"), group.episodes.map((e) =>
      el("th", {}, `episode ${e.traj} `, el("span", { class: e.won ? "won" : "lost" }, e.won ? "won" : e.status),
        el("div", { class: "nums" }, `return ${num(e.return)} (env ${num(e.env_return)}), ${e.length} steps`))));
    const table = el("table", { class: "lanes-table" }, el("thead", {}, head));
    const body = el("tbody");
    const byStep = group.episodes.map((e) => new Map(e.steps.map((s) => [s.t, s])));
    for (let t = 0; t < length; t++) {
      body.appendChild(el("tr", {}, el("th", { class: "t" }, String(t)), byStep.map((steps) => {
        const s = steps.get(t);
        return s ? stepCell(s, texts, key, scale, table) : el("td", { class: "cell blank" });
      })));
    }
    table.appendChild(body);
    return el("section", { class: "group", "data-type": group.task_type },
      el("h2", {}, `Task group ${group.group}: ${group.task_type} `, el("span", { class: "nums" }, group.task_id)),
      el("div", { class: "meta" }, `${won} of ${group.episodes.length} episodes won`),
      el("div", { class: "lanes" }, table));
  }

  function stepCell(s, texts, key, scale, table) {
    const code = String(s.g);
    const shared = s.size >= 2;
    const action = s.action !== null ? texts[s.action] : texts[s.reply];
    const parts = [`r ${num(s.r)}`, `A^E ${num(s.adv_e)}`, `A^S ${num(s.adv_s)}`, `A ${num(s.adv)}`];
    const cell = el("td", {
      class: "cell" + (s.trained ? "" : " untrained") + (shared ? " shared" : ""), "data-g": code,
      title: `anchor ${s.anchor}; step group ${code} holds ${s.size} steps of the batch` +
        (s.trained ? "" : "; the loss did not train on this step"),
      style: { background: shade(s[key], scale) },
      onmouseenter: () => light(table, code, true), onmouseleave: () => light(table, code, false),
      onclick: (e) => { if (e.target.tagName !== "SUMMARY") pin(code); },
    },
      el("span", { class: "mark" + (shared ? "" : " alone"), style: shared ? { background: groupColour(s.g) } : null },
        shared ? `g${code} x${s.size}` : "alone"),
      el("span", { class: "action" + (s.valid ? "" : " invalid") }, action === undefined ? "" : action),
      el("div", { class: "nums" }, parts.join("  ") + (s.env_r ? `  env ${num(s.env_r)}` : "")),
      el("details", {}, el("summary", {}, "observation"), el("pre", {}, texts[s.obs] || "")),
      s.action !== null && texts[s.reply] !== texts[s.action]
        ? el("details", {}, el("summary", {}, "reply"), el("pre", {}, texts[s.reply] || "")) : null);
    if (state.pinned === code) cell.classList.add("pinned");
    return cell;
  }

  // -- a leaderboard run ------------------------------------------------------------------
  const board = { type: "any", outcome: "any" };

  function renderBoard() {
    const episodes = DATA.episodes;
    const types = [...new Set(episodes.map((e) => e.task_type || "?"))].sort();
    const finals = [...new Set(episodes.flatMap((e) => Object.keys(e.final || {})))].sort();
    controls.replaceChildren(
      select("task type", "pick-type", [["any", "any"], ...types.map((t) => [t, t])], board.type,
        (v) => { board.type = v; renderBoard(); }),
      select("outcome", "pick-outcome", [["any", "any"], ["won", "won"], ["lost", "not won"]], board.outcome,
        (v) => { board.outcome = v; renderBoard(); }));
    const shown = episodes.filter((e) => (board.type === "any" || (e.task_type || "?") === board.type) &&
      (board.outcome === "any" || (board.outcome === "won") === Boolean(e.won)));
    const won = shown.filter((e) => e.won).length;
    summary.replaceChildren(el("span", { class: "stat" },
      `${shown.length} of ${episodes.length} episodes shown, ${won} won (${shown.length ? (100 * won / shown.length).toFixed(1) : "0.0"}%); ` +
      "a leaderboard run trains nothing, so it has no advantages"));
    const head = el("tr", {}, ["#", "round seed", "task", "type", "status", "won", "return", "steps", "invalid", ...finals, "error"]
      .map((h) => el("th", {}, h)));
    const rows = shown.map((e) => el("tr", {}, [e.index, e.round_seed, e.task_id, e.task_type, e.status]
      .map((v) => el("td", {}, v === undefined || v === null ? "" : String(v))),
      el("td", { class: e.won ? "won" : "lost" }, e.won ? "won" : "no"), el("td", {}, num(e.return)),
      el("td", {}, String(e.steps)), el("td", {}, String(e.invalid_steps)),
      finals.map((k) => el("td", {}, e.final && k in e.final ? Number(e.final[k]).toFixed(3) : "")),
      el("td", {}, e.error || "")));
    view.replaceChildren(el("table", { class: "episodes" }, el("thead", {}, head), el("tbody", {}, rows)));
  }

  if (DATA.kind === "run") renderRun();
  else renderBoard();
})();
