// Drives `nanovllm serve` with the unmodified npm `openai` package (v6): completions and chat,
// streaming and not, tools, n > 1, logprobs, stop strings, errors; outputs equal to
// `nanovllm generate` for the same seed. Usage: node openai_sdk.mjs PORT MODEL_NAME NANOVLLM MODEL_DIR
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [port, modelName, nanovllm, modelDir] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 60000 });
let passed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`PASS ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack || e}`);
    process.exitCode = 1;
  }
}

function generate(args) {
  const out = execFileSync(nanovllm, ['generate', '--model', modelDir, '--block-size', '16', '--threads', '2',
    '--json', ...args], { encoding: 'utf8' });
  return JSON.parse(out);
}

async function collectCompletion(stream) {
  const texts = {};
  let usage = null, finish = {};
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? '') + c.text;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { texts, usage, finish };
}

async function collectChat(stream) {
  const content = {}, reasoning = {}, finish = {};
  let usage = null, roleSeen = false;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) roleSeen = true;
      if (c.delta.content) content[c.index] = (content[c.index] ?? '') + c.delta.content;
      if (c.delta.reasoning_content) reasoning[c.index] = (reasoning[c.index] ?? '') + c.delta.reasoning_content;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { content, reasoning, finish, usage, roleSeen };
}

await check('models.list names the served model', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, modelName);
});

const prompt = 'The capital of France is';
const gen = generate(['--prompt', prompt, '--max-tokens', '12', '--temperature', '0.8', '--seed', '5'])[0];

await check('completions equal nanovllm generate for the same seed', async () => {
  const r = await client.completions.create({ model: modelName, prompt, max_tokens: 12, temperature: 0.8, seed: 5 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].text, gen.text);
  assert.equal(r.choices[0].finish_reason, gen.finish_reason);
  assert.equal(r.usage.completion_tokens, gen.token_ids.length);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

await check('streamed completions equal nanovllm generate; include_usage', async () => {
  const s = await client.completions.create({ model: modelName, prompt, max_tokens: 12, temperature: 0.8, seed: 5,
    stream: true, stream_options: { include_usage: true } });
  const { texts, usage, finish } = await collectCompletion(s);
  assert.equal(texts[0], gen.text);
  assert.equal(finish[0], gen.finish_reason);
  assert.ok(usage, 'a usage chunk');
  assert.equal(usage.completion_tokens, gen.token_ids.length);
});

await check('token-id prompts, greedy, ignore_eos, echo', async () => {
  const g = generate(['--prompt-ids', '1,2,3,4', '--max-tokens', '7', '--temperature', '0', '--ignore-eos'])[0];
  const r = await client.completions.create({ model: modelName, prompt: [1, 2, 3, 4], max_tokens: 7, temperature: 0,
    ignore_eos: true, echo: true });
  const promptText = (await (await fetch(`http://127.0.0.1:${port}/detokenize`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ tokens: [1, 2, 3, 4] }) })).json()).prompt;
  assert.equal(r.choices[0].text, promptText + g.text);
  assert.equal(r.usage.completion_tokens, 7);
  assert.equal(r.choices[0].finish_reason, 'length');
});

await check('chat equals completions on the templated prompt (stream and not)', async () => {
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hi.' }];
  const tok = await (await fetch(`http://127.0.0.1:${port}/tokenize`, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ messages, chat_template_kwargs: { enable_thinking: false } }) })).json();
  const viaCompletion = await client.completions.create({ model: modelName, prompt: tok.tokens, max_tokens: 10,
    temperature: 0.7, seed: 11, ignore_eos: true });
  const chat = await client.chat.completions.create({ model: modelName, messages, max_tokens: 10, temperature: 0.7,
    seed: 11, ignore_eos: true, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.equal(chat.usage.prompt_tokens, tok.count);
  const raw = viaCompletion.choices[0].text;
  // Without <think>/<tool_call> in the output the content is the raw completion text.
  if (!raw.includes('<think>') && !raw.includes('<tool_call>')) assert.equal(chat.choices[0].message.content, raw);
  const s = await client.chat.completions.create({ model: modelName, messages, max_tokens: 10, temperature: 0.7,
    seed: 11, ignore_eos: true, stream: true, stream_options: { include_usage: true },
    chat_template_kwargs: { enable_thinking: false } });
  const got = await collectChat(s);
  assert.ok(got.roleSeen);
  assert.equal((got.content[0] ?? ''), chat.choices[0].message.content ?? '');
  assert.equal(got.finish[0], 'length');
  assert.equal(got.usage.completion_tokens, 10);
});

await check('tools: the template renders them, the response is well formed', async () => {
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const without = await client.chat.completions.create({ model: modelName, messages, max_tokens: 4, temperature: 0 });
  const r = await client.chat.completions.create({ model: modelName, messages, tools, tool_choice: 'auto',
    max_tokens: 4, temperature: 0 });
  assert.ok(r.usage.prompt_tokens > without.usage.prompt_tokens + 20, 'tool definitions are in the prompt');
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.ok(Array.isArray(r.choices[0].message.tool_calls));
  // A history with an assistant tool call and a tool result renders too.
  const r2 = await client.chat.completions.create({ model: modelName, tools, max_tokens: 3, temperature: 0, messages: [
    ...messages,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' }] });
  assert.equal(r2.choices.length, 1);
});

await check('n > 1: n choices; choice 0 equals n = 1 with the same seed', async () => {
  const one = await client.completions.create({ model: modelName, prompt, max_tokens: 8, temperature: 1, seed: 9, ignore_eos: true });
  const three = await client.completions.create({ model: modelName, prompt, max_tokens: 8, temperature: 1, seed: 9, n: 3, ignore_eos: true });
  assert.deepEqual(three.choices.map(c => c.index), [0, 1, 2]);
  assert.equal(three.choices[0].text, one.choices[0].text);
  assert.equal(three.usage.completion_tokens, 24);
  assert.ok(new Set(three.choices.map(c => c.text)).size > 1, 'samples differ');
  const s = await client.chat.completions.create({ model: modelName, messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 5, temperature: 1, seed: 4, n: 2, ignore_eos: true, stream: true });
  const got = await collectChat(s);
  assert.deepEqual(Object.keys(got.finish).sort(), ['0', '1']);
});

await check('logprobs: completions (integer) and chat (top_logprobs)', async () => {
  const r = await client.completions.create({ model: modelName, prompt, max_tokens: 6, temperature: 0, logprobs: 3, ignore_eos: true });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 6);
  assert.equal(lp.token_logprobs.length, 6);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 6; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3);
    assert.ok(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-4, 'greedy picks the top token');
  }
  const c = await client.chat.completions.create({ model: modelName, messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true });
  const content = c.choices[0].logprobs.content;
  assert.equal(content.length, 5);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.logprob <= 0 && Array.isArray(t.bytes));
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
  }
  const s = await client.chat.completions.create({ model: modelName, messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true, stream: true });
  let n = 0;
  for await (const chunk of s) for (const ch of chunk.choices) n += ch.logprobs?.content?.length ?? 0;
  assert.equal(n, 5);
});

await check('stop strings end the text before the match; stream never shows it', async () => {
  const base = await client.completions.create({ model: modelName, prompt, max_tokens: 16, temperature: 0, ignore_eos: true });
  const text = base.choices[0].text;
  const stop = text.slice(6, 9);
  assert.ok(stop.length > 0);
  const want = text.slice(0, text.indexOf(stop));
  const r = await client.completions.create({ model: modelName, prompt, max_tokens: 16, temperature: 0, ignore_eos: true, stop: [stop] });
  assert.equal(r.choices[0].text, want);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await client.completions.create({ model: modelName, prompt, max_tokens: 16, temperature: 0, ignore_eos: true,
    stop: stop, stream: true });
  const got = await collectCompletion(s);
  assert.equal(got.texts[0] ?? '', want);
  assert.equal(got.finish[0], 'stop');
});

await check("echo + logprobs + max_tokens 0 (lm-evaluation-harness's loglikelihood) score the prompt", async () => {
  // Greedy tokens and their logprobs, then the prompt + those tokens scored with echo: the
  // continuation's prompt logprobs equal the generated ones (prefill vs decode, same positions).
  const ids = [11, 22, 33, 44, 55];
  const g = await client.completions.create({ model: modelName, prompt: ids, max_tokens: 6, temperature: 0,
    ignore_eos: true, logprobs: 1 });
  const gen = g.choices[0].logprobs;
  const contIds = generate(['--prompt-ids', ids.join(','), '--max-tokens', '6', '--temperature', '0', '--ignore-eos'])[0].token_ids;
  const r = await client.completions.create({ model: modelName, prompt: [...ids, ...contIds], max_tokens: 0,
    echo: true, logprobs: 1, temperature: 0 });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 0);
  assert.equal(r.usage.prompt_tokens, ids.length + 6);
  const lp = c.logprobs;
  assert.equal(lp.tokens.length, ids.length + 6);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  for (let i = 1; i < lp.token_logprobs.length; i++) assert.ok(lp.token_logprobs[i] <= 0);
  for (let k = 0; k < 6; k++) {
    const want = gen.token_logprobs[k], got = lp.token_logprobs[ids.length + k];
    assert.ok(Math.abs(got - want) <= 1e-3 * Math.max(1, Math.abs(want)), `token ${k}: ${got} vs ${want}`);
  }
  assert.equal(c.text, lp.tokens.join(''));
  await assert.rejects(client.completions.create({ model: modelName, prompt: ids, max_tokens: 0 }),
    e => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
});

await check('response_format json_schema and structured_outputs constrain the output', async () => {
  const schema = { type: 'object', additionalProperties: false, required: ['city', 'rank'],
    properties: { city: { type: 'string', maxLength: 10 }, rank: { type: 'integer', minimum: 1, maximum: 9 },
      tags: { type: 'array', items: { enum: ['big', 'old'] }, maxItems: 2 } } };
  for (const stream of [false, true]) {
    const args = { model: modelName, messages: [{ role: 'user', content: 'A city as JSON.' }], max_tokens: 120,
      temperature: 1, seed: 3, response_format: { type: 'json_schema', json_schema: { name: 'city', schema, strict: true } } };
    const r = stream ? await collectChat(await client.chat.completions.create({ ...args, stream: true }))
                     : await client.chat.completions.create(args);
    const choice = stream ? { message: { content: r.content[0] }, finish_reason: r.finish[0] } : r.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    const v = JSON.parse(choice.message.content);
    assert.deepEqual(Object.keys(v).filter(k => !['city', 'rank', 'tags'].includes(k)), []);
    assert.equal(typeof v.city, 'string');
    assert.ok([...v.city].length <= 10, v.city);
    assert.ok(Number.isInteger(v.rank) && v.rank >= 1 && v.rank <= 9, String(v.rank));
    if (v.tags !== undefined) assert.ok(v.tags.length <= 2 && v.tags.every(t => t === 'big' || t === 'old'));
  }
  const c = await client.completions.create({ model: modelName, prompt, max_tokens: 10, temperature: 1, seed: 4,
    structured_outputs: { choice: ['Paris', 'Lyon', 'Nice'] } });
  assert.ok(['Paris', 'Lyon', 'Nice'].includes(c.choices[0].text), c.choices[0].text);
  const o = await client.chat.completions.create({ model: modelName, messages: [{ role: 'user', content: 'JSON' }],
    max_tokens: 200, temperature: 0, response_format: { type: 'json_object' } });
  if (o.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(o.choices[0].message.content);
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
  }
  await assert.rejects(client.completions.create({ model: modelName, prompt, structured_outputs: { regex: '(a' } }),
    e => e instanceof OpenAI.BadRequestError && /regex/.test(e.message));
});

await check('tool_choice required and a named function give schema-valid tool_calls', async () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: {
      type: 'object', properties: { city: { type: 'string', description: 'the city', maxLength: 12 },
        unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city'] } } },
    { type: 'function', function: { name: 'get_time', parameters: {
      type: 'object', properties: { tz: { type: 'string', maxLength: 6 } }, required: ['tz'] } } }];
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const named = await client.chat.completions.create({ model: modelName, messages, tools, max_tokens: 100,
    temperature: 1, seed: 3, tool_choice: { type: 'function', function: { name: 'get_time' } } });
  const call = named.choices[0].message.tool_calls[0];
  assert.equal(named.choices[0].finish_reason, 'stop');
  assert.equal(call.function.name, 'get_time');
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(Object.keys(args), ['tz']);
  assert.ok(typeof args.tz === 'string' && [...args.tz].length <= 6, args.tz);
  // required: a random-weight model may run to max_tokens inside the array; of 6 seeds, the ones
  // that end must give calls that parse, and at least one must end.
  let ended = 0;
  for (let seed = 1; seed <= 6; seed++) {
    const r = await client.chat.completions.create({ model: modelName, messages, tools, max_tokens: 200,
      temperature: 1, seed, tool_choice: 'required' });
    const ch = r.choices[0];
    if (ch.finish_reason === 'length') continue;
    ended++;
    assert.equal(ch.finish_reason, 'tool_calls');
    assert.ok(ch.message.tool_calls.length >= 1);
    for (const tc of ch.message.tool_calls) {
      assert.ok(['get_weather', 'get_time'].includes(tc.function.name));
      const a = JSON.parse(tc.function.arguments);
      if (tc.function.name === 'get_weather') assert.ok(typeof a.city === 'string' && (a.unit === undefined || ['c', 'f'].includes(a.unit)));
      else assert.ok(typeof a.tz === 'string');
    }
  }
  assert.ok(ended >= 1, 'no tool_choice required request ended within 200 tokens');
  // Streamed, the same requests give the same calls as tool_calls deltas (no content): a named
  // function's arguments arrive piece by piece, required's calls each whole as its object closes.
  const streamed = async (params) => {
    const calls = [];
    let finish = null, content = '';
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
      const ch = chunk.choices[0];
      if (!ch) continue;
      if (ch.finish_reason) finish = ch.finish_reason;
      content += ch.delta.content ?? '';
      for (const d of ch.delta.tool_calls ?? []) {
        if (!calls[d.index]) calls[d.index] = { id: d.id, name: d.function.name, arguments: '' };
        calls[d.index].arguments += d.function.arguments ?? '';
      }
    }
    return { calls, finish, content };
  };
  const sNamed = await streamed({ model: modelName, messages, tools, max_tokens: 100, temperature: 1, seed: 3,
    tool_choice: { type: 'function', function: { name: 'get_time' } } });
  assert.equal(sNamed.content, '');
  assert.equal(sNamed.finish, 'stop');
  assert.equal(sNamed.calls.length, 1);
  assert.equal(sNamed.calls[0].name, 'get_time');
  assert.deepEqual(JSON.parse(sNamed.calls[0].arguments), args);
  for (let seed = 1; seed <= 6; seed++) {
    const params = { model: modelName, messages, tools, max_tokens: 200, temperature: 1, seed, tool_choice: 'required' };
    const whole = (await client.chat.completions.create(params)).choices[0];
    if (whole.finish_reason === 'length') continue;
    const s = await streamed(params);
    assert.equal(s.content, '');
    assert.equal(s.finish, whole.finish_reason);
    assert.deepEqual(s.calls.map(c => [c.name, JSON.parse(c.arguments)]),
      whole.message.tool_calls.map(c => [c.function.name, JSON.parse(c.function.arguments)]));
  }
  await assert.rejects(client.chat.completions.create({ model: modelName, messages, tools,
    tool_choice: { type: 'function', function: { name: 'nope' } } }),
    e => e instanceof OpenAI.BadRequestError && /nope/.test(e.message));
});

await check('errors come back as the SDK error classes', async () => {
  await assert.rejects(client.completions.create({ model: modelName, prompt, temperature: -1 }),
    e => e instanceof OpenAI.BadRequestError && e.status === 400 && /temperature/.test(e.message));
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt }),
    e => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.chat.completions.create({ model: modelName, messages: [] }),
    e => e instanceof OpenAI.BadRequestError && e.param === 'messages');
});

console.log(`${passed} passed`);
