// Load on `nanovllm serve`: N concurrent streaming /v1/completions requests (ignore_eos). 90% must
// complete with exactly MAX_TOKENS tokens; 10% are disconnected mid-stream (half while the load
// runs, half once the others are done). Within 1 s of the last disconnect /metrics must show no
// request running or waiting and every KV block free. /health is polled throughout.
// Usage: node load.mjs PORT SERVER_PID N MAX_TOKENS  -> prints one JSON line of results.
import http from 'node:http';
import fs from 'node:fs';

const [port, pid, N, MAX_TOKENS] = process.argv.slice(2).map(Number);
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
// The disconnected requests would run this long: far more steps than the load takes (the server
// runs with --max-model-len 32768), so that every one of them is still running when it is cut.
const LONG_TOKENS = 30000;
const t0 = performance.now();
const now = () => (performance.now() - t0) / 1000;

function procStatus() {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const get = k => Number((s.match(new RegExp(`^${k}:\\s+(\\d+)`, 'm')) || [])[1]);
  return { vmhwm_kb: get('VmHWM'), vmrss_kb: get('VmRSS'), threads: get('Threads') };
}

function get(path) {
  return new Promise(resolve => {
    const req = http.get({ host: '127.0.0.1', port, path, agent, timeout: 5000 }, res => {
      let body = '';
      res.on('data', d => body += d);
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', e => resolve({ status: 0, body: String(e) }));
    req.on('timeout', () => req.destroy(new Error('timeout')));
  });
}

function metric(text, name) {
  const m = text.match(new RegExp(`^nanovllm:${name}\\{[^}]*\\} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

// One streaming request; `disconnect` returns a promise resolved once it has been cut.
function stream(i, maxTokens, onFirstToken) {
  return new Promise(resolve => {
    const prompt = Array.from({ length: 8 }, (_, k) => 1000 + ((i * 31 + k * 7) % 5000));
    const body = JSON.stringify({ prompt, max_tokens: maxTokens, ignore_eos: true, temperature: 0, stream: true,
      stream_options: { include_usage: true } });
    const r = { i, chunks: 0, completion_tokens: -1, done: false, finish: null, error: null, req: null };
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, res => {
      if (res.statusCode !== 200) r.error = `HTTP ${res.statusCode}`;
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', d => {
        buf += d;
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const line = buf.slice(0, at);
          buf = buf.slice(at + 2);
          if (!line.startsWith('data: ')) continue;
          const data = line.slice(6);
          if (data === '[DONE]') { r.done = true; continue; }
          const j = JSON.parse(data);
          if (j.error) r.error = j.error.message;
          if (j.usage) r.completion_tokens = j.usage.completion_tokens;
          for (const c of j.choices ?? []) {
            if (c.text) { r.chunks++; if (r.chunks === 1 && onFirstToken) onFirstToken(r); }
            if (c.finish_reason) r.finish = c.finish_reason;
          }
        }
      });
      res.on('end', () => resolve(r));
      res.on('error', e => { r.error ??= String(e); resolve(r); });
    });
    r.req = req;
    req.on('error', e => { r.error ??= String(e); resolve(r); });
    req.on('close', () => resolve(r));
    req.end(body);
  });
}

// /health throughout.
let healthOk = 0, healthBad = 0, healthMaxMs = 0, peakThreads = 0, polling = true;
const healthLoop = (async () => {
  for (let k = 0; k < 100000 && polling; k++) {
    const s = performance.now();
    const h = await get('/health');
    healthMaxMs = Math.max(healthMaxMs, performance.now() - s);
    if (h.status === 200) healthOk++; else healthBad++;
    peakThreads = Math.max(peakThreads, procStatus().threads);
    await new Promise(r => setTimeout(r, 50));
  }
})();

const early = [], late = [];
let lastDisconnect = 0;
// A request whose final event came before its cut was not disconnected mid-stream: counted apart.
const cut = r => { r.finishedBeforeCut = r.finish !== null; r.req.destroy(); lastDisconnect = now(); };
const normal = [], cutPromises = [];
for (let i = 0; i < N; i++) {
  if (i % 10 === 0) {
    const isEarly = (i / 10) % 2 === 0;
    const holder = isEarly ? early : late;
    // Early ones are cut at their first token; late ones once every normal request is done.
    cutPromises.push(stream(i, LONG_TOKENS, r => { holder.push(r); if (isEarly) cut(r); }));
  } else {
    normal.push(stream(i, MAX_TOKENS));
  }
}
const results = await Promise.all(normal);
const normalDoneAt = now();
// Every late request must have streamed a token by now (they run until cut).
for (let k = 0; k < 600 && late.length < Math.ceil(N / 20); k++) await new Promise(r => setTimeout(r, 50));
for (const r of late) cut(r);
const cutAt = lastDisconnect;
await Promise.all(cutPromises);
// Within 1 s of the last disconnect: nothing running or waiting, every block free.
let freedAfter = null, last = null;
for (let k = 0; k < 200; k++) {
  const m = await get('/metrics');
  last = { running: metric(m.body, 'num_requests_running'), waiting: metric(m.body, 'num_requests_waiting'),
    usage: metric(m.body, 'kv_cache_usage_perc'), free: metric(m.body, 'kv_cache_free_blocks'),
    total: metric(m.body, 'kv_cache_total_blocks'), aborted: metric(m.body, 'request_success_total') };
  if (last.running === 0 && last.waiting === 0 && last.free === last.total) { freedAfter = now() - cutAt; break; }
  await new Promise(r => setTimeout(r, 10));
}
const m = await get('/metrics');
const aborts = Number((m.body.match(/^nanovllm:request_success_total\{[^}]*finished_reason="abort"\} (\S+)$/m) || [])[1]);
polling = false;
await healthLoop;
const exact = results.filter(r => !r.error && r.done && r.completion_tokens === MAX_TOKENS && r.finish === 'length').length;
const bad = results.filter(r => !(r.done && r.completion_tokens === MAX_TOKENS)).slice(0, 3)
  .map(r => ({ i: r.i, error: r.error, done: r.done, tokens: r.completion_tokens, finish: r.finish }));
const st = procStatus();
console.log(JSON.stringify({ requests: N, normal: results.length, exact_max_tokens: exact, bad,
  disconnected: early.length + late.length, early: early.length, late: late.length,
  finished_before_cut: [...early, ...late].filter(r => r.finishedBeforeCut).length, aborts_counted: aborts,
  normal_done_s: +normalDoneAt.toFixed(3), freed_after_last_disconnect_s: freedAfter, last_metrics: last,
  health_ok: healthOk, health_bad: healthBad, health_max_ms: +healthMaxMs.toFixed(1),
  peak_threads: peakThreads, vmhwm_mib: +(st.vmhwm_kb / 1024).toFixed(1), total_s: +now().toFixed(3) }));
