// The chat page in headless Chromium (Debian's chromium, driven by npm playwright-core), against a
// running `nanovllm serve`. Run by tests/server/chat_page_test.cpp:
//   node chat_page_test.mjs --url http://127.0.0.1:PORT --artifacts DIR
// 1. real server: a message is sent, tokens stream in (the request shows as running in
//    /metrics), Stop ends it (no request running within 2 s), and a next message works;
// 2. mocked responses (page.route): the request carries the sampling settings, thinking
//    (reasoning_content or <think> tags) is shown folded, usage gives the token count, and an
//    OpenAI error object is shown in the alert.
// Exit 0: passed; 1: a check failed; 2: chromium or playwright-core is missing.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

const CHROMIUM = "/usr/bin/chromium";
const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith("--") ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []));
const base = args.url;
const artifacts = args.artifacts;
if (!base || !artifacts) {
  console.error("usage: node chat_page_test.mjs --url http://127.0.0.1:PORT --artifacts DIR");
  process.exit(1);
}

let chromium;
try {
  ({ chromium } = createRequire(import.meta.url)("playwright-core"));
} catch (e) {
  console.error(`npm package playwright-core is missing (${e.message.split("\n")[0]}): run scripts/install_deps.sh (npm install)`);
  process.exit(2);
}
if (!fs.existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} is missing: run scripts/install_deps.sh (apt-get install chromium)`);
  process.exit(2);
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

// nanovllm:num_requests_running from /metrics (Prometheus text).
async function runningRequests() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("nanovllm:num_requests_running"));
  if (!line) throw new Error("/metrics has no nanovllm:num_requests_running");
  return Number(line.trim().split(/\s+/).pop());
}

async function waitFor(what, fn, ms) {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const lastReply = "#log .msg.assistant:last-of-type";
const replyState = (page) => page.$eval(lastReply, (el) => ({
  state: el.dataset.state, tokens: Number(el.dataset.tokens),
  content: el.querySelector(".content").textContent, stats: el.querySelector(".stats").textContent,
  thinking: el.querySelector(".thinking").textContent, thinkingHidden: el.querySelector(".thinking").hidden,
  thinkingOpen: el.querySelector(".thinking").open,
}));

async function sendMessage(page, text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
}

async function realServer(page) {
  await page.goto(base);
  await page.waitForFunction(() => document.querySelector("#model-name").textContent.startsWith("model: "));
  check(true, `page loaded, ${await page.textContent("#model-name")}`);

  const maxTokens = 3000;
  await page.fill("#max_tokens", String(maxTokens));
  await sendMessage(page, "Tell me a long story about paged attention.");
  await page.waitForFunction((sel) => {
    const el = document.querySelector(sel);
    return el && el.dataset.state === "streaming" && Number(el.dataset.tokens) >= 20;
  }, lastReply, { timeout: 20000 });
  const first = await replyState(page);
  check(first.content.length > 0, `tokens stream in (${first.tokens} so far)`);
  check(await page.isEnabled("#stop") && !(await page.isEnabled("#send")), "Stop enabled and Send disabled while streaming");
  check(await runningRequests() === 1, "/metrics shows the page's request running");
  // The reply outgrows the conversation's box (or 200 more tokens arrive): Stop must not have
  // moved, or a user (and Playwright's click) chases it down the page.
  const stopAt = await page.locator("#stop").boundingBox();
  await page.waitForFunction(([sel, n]) => {
    const log = document.querySelector("#log");
    return Number(document.querySelector(sel).dataset.tokens) > n &&
           (log.scrollHeight > log.clientHeight || Number(document.querySelector(sel).dataset.tokens) > n + 200);
  }, [lastReply, first.tokens], { timeout: 10000 });
  const stopNow = await page.locator("#stop").boundingBox();
  check(JSON.stringify(stopAt) === JSON.stringify(stopNow),
        `Stop stays in place while the reply streams in (${JSON.stringify(stopAt)} then ${JSON.stringify(stopNow)})`);
  await page.screenshot({ path: path.join(artifacts, "chat_page_streaming.png"), fullPage: true });

  await page.click("#stop");
  // Generous limits: this checks that Stop works, not how fast (ctest runs it beside CPU-heavy
  // tests on a 2-core machine).
  await page.waitForFunction((sel) => document.querySelector(sel).dataset.state === "stopped", lastReply,
                             { timeout: 20000 });
  const stopped = await replyState(page);
  check(stopped.tokens < maxTokens, `Stop ended the reply early (${stopped.tokens} of ${maxTokens} tokens)`);
  check(/tokens\/s/.test(stopped.stats) && /stopped/.test(stopped.stats), `stats shown: "${stopped.stats}"`);
  await waitFor("no request running after Stop", async () => (await runningRequests()) === 0, 10000);
  check(true, "the server aborted the request: nanovllm:num_requests_running == 0 within 10 s");
  check(await page.isEnabled("#send") && !(await page.isEnabled("#stop")), "Send enabled again after Stop");

  // The conversation goes on after a stop.
  await page.fill("#max_tokens", "8");
  await sendMessage(page, "And a short one?");
  await page.waitForFunction((sel) => document.querySelector(sel).dataset.state === "done", lastReply,
                             { timeout: 20000 });
  const second = await replyState(page);
  check(second.tokens >= 1 && second.tokens <= 8, `second reply done with ${second.tokens} tokens (max 8)`);
  check(await page.locator("#log .msg").count() === 4, "4 messages in the conversation");
  check(await page.isHidden("#error"), "no error shown");
  await page.screenshot({ path: path.join(artifacts, "chat_page.png"), fullPage: true });
}

function sse(chunks) {
  return chunks.map((c) => `data: ${typeof c === "string" ? c : JSON.stringify(c)}\n\n`).join("");
}

const delta = (d, finish = null) => ({ object: "chat.completion.chunk", choices: [{ index: 0, delta: d, finish_reason: finish }] });

async function mocked(page) {
  await page.goto(base);
  let sent = null;
  let body = "";
  let status = 200;
  await page.route("**/v1/chat/completions", async (route) => {
    sent = route.request().postDataJSON();
    await route.fulfill({ status, contentType: status === 200 ? "text/event-stream" : "application/json", body });
  });

  // reasoning_content from the server's reasoning parser.
  body = sse([delta({ role: "assistant" }), delta({ reasoning_content: "The user greets; " }),
              delta({ reasoning_content: "answer briefly." }), delta({ content: "Hello" }),
              delta({ content: " there!" }, "stop"),
              { choices: [], usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 } }, "[DONE]"]);
  await page.fill("#system", "You are terse.");
  await page.fill("#temperature", "0.3");
  await page.fill("#top_p", "0.8");
  await page.fill("#top_k", "5");
  await page.fill("#max_tokens", "64");
  await page.uncheck("#thinking");
  await sendMessage(page, "Hi");
  await page.waitForFunction((sel) => document.querySelector(sel).dataset.state === "done", lastReply);
  check(sent.stream === true && sent.stream_options.include_usage === true, "request streams with usage");
  check(sent.temperature === 0.3 && sent.top_p === 0.8 && sent.top_k === 5 && sent.max_tokens === 64,
        "request carries the sampling settings");
  check(sent.messages[0].role === "system" && sent.messages[0].content === "You are terse." &&
        sent.messages.at(-1).content === "Hi", "request carries the system prompt and the message");
  check(sent.chat_template_kwargs.enable_thinking === false, "thinking switch sent as chat_template_kwargs");
  let r = await replyState(page);
  check(r.content === "Hello there!", "answer shown");
  check(!r.thinkingHidden && !r.thinkingOpen && r.thinking.includes("The user greets; answer briefly."),
        "reasoning_content shown folded");
  check(r.tokens === 7, "token count from usage");

  // <think> tags left in the content.
  body = sse([delta({ content: "<think>\nsecret " }), delta({ content: "plan</think>\n\n" }),
              delta({ content: "Sure." }, "stop"), "[DONE]"]);
  await sendMessage(page, "Again");
  await page.waitForFunction((sel) => document.querySelector(sel).dataset.state === "done", lastReply);
  r = await replyState(page);
  check(r.content === "Sure." && !r.thinkingHidden && !r.thinkingOpen && r.thinking.includes("secret plan"),
        "<think> text shown folded, apart from the answer");
  check(sent.messages.at(-2).role === "assistant" && sent.messages.at(-2).content === "Hello there!",
        "history sends the answer without its thinking");

  // An OpenAI error object.
  status = 400;
  body = JSON.stringify({ error: { message: "temperature must be in [0, 2], got 9", type: "invalid_request_error",
                                   param: "temperature", code: null } });
  await sendMessage(page, "Break");
  await page.waitForFunction((sel) => document.querySelector(sel).dataset.state === "error", lastReply);
  const alert = await page.textContent("#error");
  check(await page.isVisible("#error") && alert.includes("400") && alert.includes("temperature must be in [0, 2]"),
        `error shown: "${alert}"`);
  await page.screenshot({ path: path.join(artifacts, "chat_page_mocked.png"), fullPage: true });
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "nanovllm-chromium-"));
let context;
let code = 0;
try {
  fs.mkdirSync(artifacts, { recursive: true });
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1100, height: 800 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  page.on("pageerror", (e) => { console.error(`page error: ${e.message}`); code = 1; });
  await realServer(page);
  await mocked(await context.newPage());
  console.log(code === 0 ? "chat page: all checks passed" : "chat page: the page threw errors");
} catch (e) {
  console.error(e.stack || String(e));
  code = 1;
} finally {
  if (context) await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(code);
