// Drives the chat page of `redwing serve` in headless Debian chromium through playwright-core:
// sends a message and sees the streamed answer, then stops a long one. Prints one JSON object.
//   node chat_page_browser.js <node_modules> <http://127.0.0.1:PORT/> <chromium executable>
"use strict";
const path = require("path");
const [modules, url, executablePath] = process.argv.slice(2);
const {chromium} = require(path.join(modules, "playwright-core"));

async function health() {
  const r = await fetch(url + "health");
  return r.json();
}

(async () => {
  const out = {external: []};
  const browser = await chromium.launch({
    executablePath, headless: true, timeout: 60000,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    page.on("request", (r) => {
      if (!r.url().startsWith(url)) out.external.push(r.url());
    });
    page.setDefaultTimeout(30000);
    await page.goto(url);
    await page.fill("#temperature", "0");
    await page.fill("#maxtokens", "8");
    await page.fill("#input", "Hello!");
    await page.press("#input", "Enter");
    await page.waitForSelector('.assistant[data-state="done"]');
    out.first = await page.textContent(".assistant");
    out.user = await page.textContent(".user");
    out.stats = await page.textContent("#stats");
    await page.waitForFunction(() => /MiB/.test(document.getElementById("memory").textContent));
    out.memory = await page.textContent("#memory");

    // A long answer, stopped while it streams.
    await page.fill("#maxtokens", "4000");
    await page.fill("#input", "Tell me everything.");
    await page.press("#input", "Enter");
    await page.waitForFunction(() => {
      const a = document.querySelectorAll(".assistant");
      return a.length === 2 && a[1].textContent.length > 30;
    });
    out.busy_before_stop = (await health()).busy;
    const t0 = Date.now();
    await page.click("#stop");
    await page.waitForSelector('.assistant[data-state="stopped"]');
    let h = await health();
    while (h.busy && Date.now() - t0 < 5000) {
      await new Promise((r) => setTimeout(r, 10));
      h = await health();
    }
    out.freed_ms = Date.now() - t0;
    out.busy_after_stop = h.busy;
    out.stopped_text = await page.textContent(".assistant >> nth=1");
    out.send_enabled = await page.isEnabled("#send");
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
})().catch((e) => {
  process.stdout.write(JSON.stringify({fatal: String(e.stack || e)}));
  process.exit(1);
});
