// Drives the chat page of `redwing serve` in headless Debian chromium through playwright-core:
// a message without the API key fails (401) and must leave nothing to resend; with the key the
// settings fields take the server's defaults (from /v1/models, which needs the key) and the page
// sends them and sees the streamed answer; stops a long one; and "New chat" during a streamed
// answer must not carry it into the new conversation. Prints one JSON object.
//   node chat_page_browser.js <node_modules> <http://127.0.0.1:PORT/> <chromium executable> <key>
"use strict";
const path = require("path");
const [modules, url, executablePath, apiKey] = process.argv.slice(2);
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
    // Every chat request the page sends.
    const sent = [];
    page.on("request", (r) => {
      if (r.url().endsWith("/v1/chat/completions")) sent.push(JSON.parse(r.postData()));
    });
    const fields = () => page.evaluate(() => ({
      temperature: document.getElementById("temperature").value,
      top_p: document.getElementById("topp").value,
      max_tokens: document.getElementById("maxtokens").value,
    }));
    page.setDefaultTimeout(30000);
    await page.goto(url);
    out.icon = await page.evaluate(() => document.querySelector('link[rel="icon"]').href);
    // Without the key the server's defaults cannot be read: the fields stay empty.
    await page.waitForLoadState("networkidle");
    out.fields_without_key = await fields();
    // Without the key: 401, shown as an error.
    await page.fill("#input", "Hello!");
    await page.press("#input", "Enter");
    await page.waitForSelector('.assistant[data-state="error"]');
    out.error_text = await page.textContent('.assistant[data-state="error"]');
    // With it: the answer; the failed turn is not sent again.
    await page.fill("#apikey", apiKey);
    await page.fill("#input", "Hello!");
    await page.press("#input", "Enter");
    await page.waitForSelector('.assistant[data-state="done"]');
    out.after_error_messages = sent[sent.length - 1].messages;
    // With it, the fields show the server's defaults, and the request carried them.
    out.fields = await fields();
    const last = sent[sent.length - 1];
    out.sent_settings = {temperature: last.temperature, top_p: last.top_p, max_tokens: last.max_tokens};
    out.first = await page.textContent('.assistant[data-state="done"]');
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
      return a.length === 3 && a[2].textContent.length > 30;
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
    out.stopped_text = await page.textContent(".assistant >> nth=2");
    out.send_enabled = await page.isEnabled("#send");

    // "New chat" while an answer streams: the new conversation starts empty.
    await page.fill("#input", "Tell me more.");
    await page.press("#input", "Enter");
    await page.waitForFunction(() => {
      const a = document.querySelectorAll(".assistant");
      return a.length === 4 && a[3].textContent.length > 30;
    });
    await page.click("#clear");
    await page.waitForFunction(() => !document.getElementById("send").disabled);
    await page.fill("#maxtokens", "4");
    await page.fill("#input", "Hi again");
    await page.press("#input", "Enter");
    await page.waitForSelector('.assistant[data-state="done"]');
    out.after_new_chat_messages = sent[sent.length - 1].messages;
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
})().catch((e) => {
  process.stdout.write(JSON.stringify({fatal: String(e.stack || e)}));
  process.exit(1);
});
