// Opens a bench-ab report (report.html) in headless Debian chromium through playwright-core and
// checks it against report.json: every table cell's value, the verdicts, the SVG plots drawn
// (one ratio plot per case, one run plot per figure, a point per value), no network requests.
// Prints one JSON object {ok, errors, ...}.
//   node bench_ab_browser.js <node_modules> <run dir> <chromium executable>
"use strict";
const fs = require("fs");
const path = require("path");
const [modules, dir, executablePath] = process.argv.slice(2);
const {chromium} = require(path.join(modules, "playwright-core"));

function close(a, b) {
  if (a === null || b === null) return a === b;
  return Math.abs(a - b) <= 1e-12 * Math.max(1, Math.abs(a), Math.abs(b));
}

(async () => {
  const rep = JSON.parse(fs.readFileSync(path.join(dir, "report.json"), "utf8"));
  const out = {ok: false, errors: [], external: [], tables: 0, ratio_plots: 0, run_plots: 0,
               cells_checked: 0};
  const err = (m) => out.errors.push(m);
  const browser = await chromium.launch({
    executablePath, headless: true, timeout: 60000,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    page.on("request", (r) => {
      if (!r.url().startsWith("file://")) out.external.push(r.url());
    });
    await page.goto("file://" + path.resolve(dir, "report.html"));
    const dom = await page.evaluate(() => {
      const num = (s) => (s === "" || s === null ? null : Number(s));
      const cases = {};
      for (const t of document.querySelectorAll("table.case")) {
        const rows = {};
        for (const tr of t.querySelectorAll("tr[data-figure]")) {
          const cells = {};
          for (const td of tr.querySelectorAll("td[data-field]")) {
            const f = td.dataset.field;
            if (f === "verdict") cells[f] = td.textContent;
            else if (f === "ci95") cells[f] = [num(td.dataset.low), num(td.dataset.high)];
            else cells[f] = num(td.dataset.value);
          }
          rows[tr.dataset.figure] = cells;
        }
        cases[t.dataset.case] = rows;
      }
      const box = (el) => {
        const r = el.getBoundingClientRect();
        return {w: r.width, h: r.height};
      };
      const ratio = [...document.querySelectorAll("svg.ratio-plot")].map((s) => ({
        case: s.dataset.case, box: box(s), points: s.querySelectorAll("circle.ratio-point").length,
        cis: s.querySelectorAll("line.ci").length}));
      const runs = [...document.querySelectorAll("svg.runs-plot")].map((s) => ({
        figure: s.dataset.figure, box: box(s),
        points: s.querySelectorAll("circle.run-point").length}));
      return {cases, ratio, runs, title: document.title,
              base: document.getElementById("base-name").textContent,
              trial: document.getElementById("try-name").textContent,
              commands: document.querySelectorAll("#commands li").length,
              cpu: document.querySelector("#machine td[data-field=cpu]").textContent};
    });
    out.tables = Object.keys(dom.cases).length;
    out.ratio_plots = dom.ratio.length;
    out.run_plots = dom.runs.length;
    if (dom.base !== rep.base.name || dom.trial !== rep.try.name) err("build names differ");
    if (dom.commands !== rep.commands.length) err(`commands: ${dom.commands} vs ${rep.commands.length}`);
    if (dom.cpu !== String(rep.machine.cpu)) err(`cpu: ${dom.cpu} vs ${rep.machine.cpu}`);
    if (out.tables !== rep.cases.length) err(`tables: ${out.tables} vs ${rep.cases.length} cases`);
    let runPlot = 0;
    for (const c of rep.cases) {
      const rows = dom.cases[c.name];
      if (!rows) { err(`no table for case ${c.name}`); continue; }
      const rp = dom.ratio.find((r) => r.case === c.name);
      const withRatio = c.figures.filter((f) => f.ratio !== null).length;
      if (!rp) err(`no ratio plot for ${c.name}`);
      else {
        if (rp.points !== withRatio) err(`${c.name}: ${rp.points} ratio points, ${withRatio} ratios`);
        if (rp.cis !== c.figures.filter((f) => f.ratio !== null && f.ci95).length)
          err(`${c.name}: ${rp.cis} interval lines`);
        if (!(rp.box.w > 100 && rp.box.h > 20)) err(`${c.name}: ratio plot not drawn`);
      }
      for (const f of c.figures) {
        const cells = rows[f.key];
        if (!cells) { err(`${c.name}/${f.key}: no row`); continue; }
        for (const r of f.runs) {
          out.cells_checked++;
          if (!close(cells["run" + r.index], r.value))
            err(`${c.name}/${f.key} run ${r.index}: ${cells["run" + r.index]} vs ${r.value}`);
        }
        for (const k of ["base_mean", "try_mean", "ratio", "noise_floor"]) {
          out.cells_checked++;
          if (!close(cells[k], f[k])) err(`${c.name}/${f.key} ${k}: ${cells[k]} vs ${f[k]}`);
        }
        const ci = f.ci95 || [null, null];
        if (!close(cells.ci95[0], ci[0]) || !close(cells.ci95[1], ci[1]))
          err(`${c.name}/${f.key} ci95: ${cells.ci95} vs ${ci}`);
        if (cells.verdict !== f.verdict) err(`${c.name}/${f.key} verdict: ${cells.verdict} vs ${f.verdict}`);
        const plot = dom.runs[runPlot++];
        const values = f.runs.filter((r) => r.value !== null).length;
        if (!plot || plot.figure !== f.key) err(`${c.name}/${f.key}: run plot missing`);
        else {
          if (plot.points !== values) err(`${c.name}/${f.key}: ${plot.points} points, ${values} values`);
          if (!(plot.box.w > 100 && plot.box.h > 50)) err(`${c.name}/${f.key}: run plot not drawn`);
        }
      }
    }
    if (out.external.length) err("network requests: " + out.external.join(" "));
    out.ok = out.errors.length === 0;
  } catch (e) {
    err(String(e && e.stack || e));
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})();
