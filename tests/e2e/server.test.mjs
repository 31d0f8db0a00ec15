// End-to-end tests of `turbokv serve` with the official OpenAI client (npm `openai`, pinned in
// package-lock.json) and raw HTTP for malformed input. Each server is started on 127.0.0.1 with
// an ephemeral port and stopped (SIGTERM, checked to exit 0) at the end. Every request has a
// timeout. Run: node --test tests/e2e/server.test.mjs (ctest runs it; TURBOKV_TOOL names the binary).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServe, stop, killAll, metrics as baseMetrics, waitFor } from './serve_helpers.mjs';

const KEY = 'sk-test-key';

async function startServer(args) {
  return startServe(args);
}

async function stopServer(server) {
  const result = await stop(server);
  assert.equal(result?.code, 0, `server exit ${JSON.stringify(result)}: ${server.output()}`);
}

const metrics = (url) => baseMetrics(url, KEY);  // with --api-key, /metrics needs the key too

let main;
let client;
const MODEL = 'kjv-llama-3M.bin';

before(async () => {
  main = await startServer(['--model', MODEL, '--api-key', KEY, '--kv-budget', '64MiB', '--parallel', '16']);
  client = new OpenAI({ baseURL: `${main.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
});

after(async () => {
  try {
    if (main) await stopServer(main);
  } finally {
    killAll();
  }
});

const prompts = [
  'In the beginning', 'And God said', 'The LORD is my shepherd', 'Blessed are the meek',
  'And it came to pass', 'Now the serpent', 'For God so loved', 'Jesus wept',
  'Let there be light', 'Honour thy father', 'In my Father\'s house', 'The heavens declare',
  'Then said Jesus', 'And the earth was', 'Thou shalt not', 'Behold, I stand',
];

const greedy = (prompt, extra = {}) =>
  client.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0, ...extra });

test('models lists the served model', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
});

test('completion: text, usage and finish_reason length', async () => {
  const r = await greedy('In the beginning');
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.length > 10, r.choices[0].text);
  assert.equal(r.usage.completion_tokens, 24);
  assert.ok(r.usage.prompt_tokens > 3);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  // Greedy is deterministic.
  assert.equal((await greedy('In the beginning')).choices[0].text, r.choices[0].text);
});

test('streamed completion equals the whole one, with usage last', async () => {
  const whole = (await greedy('And God said')).choices[0].text;
  const stream = await client.completions.create({
    model: MODEL, prompt: 'And God said', max_tokens: 24, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole);
  assert.equal(finish, 'length');
  assert.ok(chunks > 5, `only ${chunks} chunks`);
  assert.equal(usage.completion_tokens, 24);
});

test('chat completion, streamed and not', async () => {
  const messages = [{ role: 'system', content: 'The book of Genesis.' }, { role: 'user', content: 'Who made the light?' }];
  const r = await client.chat.completions.create({ model: MODEL, messages, max_completion_tokens: 20, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.usage.completion_tokens, 20);
  const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 20, temperature: 0, stream: true });
  let text = '';
  let role = null;
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta ?? {};
    if (delta.role) role = delta.role;
    text += delta.content ?? '';
  }
  assert.equal(role, 'assistant');
  assert.equal(text, r.choices[0].message.content);
});

test('stop strings end the text before them', async () => {
  const full = (await greedy('In the beginning', { max_tokens: 40 })).choices[0].text;
  const cut = full.indexOf(' ', 6);
  assert.ok(cut > 0, full);
  const stop = full.slice(cut, cut + 3);
  const r = await greedy('In the beginning', { max_tokens: 40, stop: [stop, 'zzzz'] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
});

test('16 concurrent greedy requests each equal their solo output', async () => {
  const solo = [];
  for (const p of prompts) solo.push((await greedy(p, { max_tokens: 32 })).choices[0].text);
  const peakBefore = (await metrics(main.url)).turbokv_requests_running_peak;
  const together = await Promise.all(prompts.map((p) => greedy(p, { max_tokens: 32 })));
  together.forEach((r, i) => assert.equal(r.choices[0].text, solo[i], `prompt ${i}: ${prompts[i]}`));
  const m = await metrics(main.url);
  assert.ok(m.turbokv_requests_running_peak >= 8 && m.turbokv_requests_running_peak >= peakBefore,
    `peak running ${m.turbokv_requests_running_peak}: the requests did not run together`);
  await waitFor(async () => (await metrics(main.url)).turbokv_kv_reserved_bytes === 0, 'reservations back to 0');
});

test('a repeated prompt reuses its prefix and answers the same', async () => {
  const prompt = 'And the LORD God formed man of the dust of the ground, and breathed into his nostrils the breath of life';
  const first = await greedy(prompt);
  const second = await greedy(prompt);
  assert.equal(second.choices[0].text, first.choices[0].text);
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(second.usage));
  assert.ok(second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens);
  const m = await metrics(main.url);
  assert.ok(m.turbokv_prefix_cache_hits_total >= 1);
});

test('API errors surface in the client with the right status', async () => {
  await assert.rejects(greedy('x', { model: 'gpt-4o' }), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(greedy('x', { n: 0 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  await assert.rejects(greedy('x', { max_tokens: -5 }), (e) => e.status === 400 && /max_tokens/.test(e.message));
  await assert.rejects(greedy('x', { temperature: 'hot' }), (e) => e.status === 400);
  await assert.rejects(greedy('x'.repeat(4000)), (e) => e.status === 400 && /context/.test(e.message));
  const wrong = new OpenAI({ baseURL: `${main.url}/v1`, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('fields the server does not implement, or does not know, are refused by name', async () => {
  const post = (path, body) => fetch(`${main.url}${path}`, {
    method: 'POST', body: JSON.stringify(body),
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    signal: AbortSignal.timeout(10000),
  });
  const messages = [{ role: 'user', content: 'Who made the light?' }];
  const refused = [
    // tools on a model whose chat has no tool format (the kjv model's plain one): chat_tools.test.mjs
    ['/v1/chat/completions', { messages, tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools'],
    ['/v1/chat/completions', { messages, tool_choice: 'required' }, 'tool_choice'],
    ['/v1/chat/completions', { messages, functions: [{ name: 'f' }] }, 'functions'],
    ['/v1/chat/completions', { messages, response_format: { type: 'json_object' } }, 'response_format'],
    ['/v1/chat/completions', { messages, frobnicate: 1 }, 'frobnicate'],
    ['/v1/completions', { prompt: 'x', suffix: 'amen' }, 'suffix'],
    ['/v1/completions', { prompt: 'x', best_of: 3 }, 'best_of'],
    ['/v1/completions', { prompt: 'x', top_k: 40 }, 'top_k'],
  ];
  for (const [path, body, param] of refused) {
    const r = await post(path, body);
    assert.equal(r.status, 400, param);
    const j = await r.json();
    assert.equal(j.error.code, 'unsupported_parameter', JSON.stringify(j));
    assert.equal(j.error.param, param);
  }
  // Through the client: the same 400, as a BadRequestError.
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages, tools: [{ type: 'function', function: { name: 'f' } }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools' && e.code === 'unsupported_parameter');
  // Accepted: user (no effect), the extension ignore_eos, null for an unimplemented field.
  const ok = await post('/v1/completions', { prompt: 'x', max_tokens: 2, user: 'u', ignore_eos: true, suffix: null });
  assert.equal(ok.status, 200);
});

test('chat logprobs, streamed and not, name the tokens of the answer', async () => {
  const messages = [{ role: 'user', content: 'And God said' }];
  const r = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 12);
  assert.equal(content.map((t) => t.token).join(''), r.choices[0].message.content);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
    assert.ok(t.top_logprobs[1].logprob <= t.top_logprobs[0].logprob);
  }
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true, stream: true,
  });
  const streamed = [];
  for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  assert.deepEqual(streamed, content);
});

test('completion logprobs and echo, streamed and not; n choices', async () => {
  const prompt = 'In the beginning God created';
  const r = await greedy(prompt, { max_tokens: 6, logprobs: 2, echo: true });
  const c = r.choices[0];
  assert.ok(c.text.startsWith(prompt), c.text);
  const lp = c.logprobs;
  assert.equal(lp.tokens.length, r.usage.prompt_tokens + 6);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.equal(lp.tokens.join(''), c.text);
  for (let i = 1; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.equal(Object.keys(lp.top_logprobs[i]).length <= 2, true);
    assert.equal(lp.text_offset[i], lp.tokens.slice(0, i).join('').length);  // ASCII text: bytes = characters
  }
  // Scoring only (max_tokens 0, lm-evaluation-harness's loglikelihood request).
  const scored = await greedy(prompt, { max_tokens: 0, logprobs: 1, echo: true });
  assert.equal(scored.choices[0].text, prompt);
  assert.equal(scored.usage.completion_tokens, 0);
  assert.deepEqual(scored.choices[0].logprobs.token_logprobs, lp.token_logprobs.slice(0, r.usage.prompt_tokens));
  // Streamed: the same tokens and numbers, chunk by chunk.
  const stream = await client.completions.create({
    model: MODEL, prompt, max_tokens: 6, temperature: 0, logprobs: 2, echo: true, stream: true,
  });
  let text = '';
  const tokens = [];
  const values = [];
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      text += ch.text;
      if (ch.logprobs) {
        tokens.push(...ch.logprobs.tokens);
        values.push(...ch.logprobs.token_logprobs);
      }
    }
  }
  assert.equal(text, c.text);
  assert.deepEqual(tokens, lp.tokens);
  assert.deepEqual(values, lp.token_logprobs);
  // n: 3 sampled choices (seeds seed, seed + 1, seed + 2): indices 0..2, usage adds their tokens.
  const many = await client.completions.create({ model: MODEL, prompt, max_tokens: 16, temperature: 1, seed: 7, n: 3, ignore_eos: true });
  assert.deepEqual(many.choices.map((x) => x.index), [0, 1, 2]);
  assert.equal(many.usage.completion_tokens, 48);
  assert.ok(new Set(many.choices.map((x) => x.text)).size > 1, 'the choices are sampled differently');
  const again = await client.completions.create({ model: MODEL, prompt, max_tokens: 16, temperature: 1, seed: 7, n: 3, ignore_eos: true });
  assert.deepEqual(again.choices.map((x) => x.text), many.choices.map((x) => x.text));
  // A batch of prompts, n each: choices prompt-major (index = prompt * n + choice), each prompt's
  // tokens counted once.
  const pair = ['In the beginning', 'And God said'];
  const solos = await Promise.all(pair.map((p) => greedy(p, { max_tokens: 8 })));
  const batch = await greedy(pair, { max_tokens: 8, n: 2 });
  assert.deepEqual(batch.choices.map((x) => x.index), [0, 1, 2, 3]);
  assert.deepEqual(batch.choices.map((x) => x.text), [0, 0, 1, 1].map((i) => solos[i].choices[0].text));
  assert.equal(batch.usage.prompt_tokens, solos[0].usage.prompt_tokens + solos[1].usage.prompt_tokens);
  assert.equal(batch.usage.completion_tokens, 32);
  // Streamed, each choice's chunks carry its index and add up to its text.
  const manyStream = await client.completions.create({
    model: MODEL, prompt, max_tokens: 16, temperature: 1, seed: 7, n: 3, ignore_eos: true, stream: true,
  });
  const texts = ['', '', ''];
  const finished = [];
  for await (const chunk of manyStream) {
    for (const ch of chunk.choices) {
      texts[ch.index] += ch.text;
      if (ch.finish_reason) finished.push(ch.index);
    }
  }
  assert.deepEqual(texts, many.choices.map((x) => x.text));
  assert.deepEqual(finished.sort(), [0, 1, 2]);
  // A bias and the penalties reach the sampler: +100 on one token (id 300 of the 512) makes it
  // every token; penalties move greedy text off its repeats.
  const biased = await greedy(prompt, { max_tokens: 5, logprobs: 0, logit_bias: { 300: 100 }, ignore_eos: true });
  assert.equal(new Set(biased.choices[0].logprobs.tokens).size, 1);
  const plain = await greedy(prompt, { max_tokens: 24, ignore_eos: true });
  const penalized = await greedy(prompt, { max_tokens: 24, frequency_penalty: 2, presence_penalty: 0.5, ignore_eos: true });
  assert.notEqual(penalized.choices[0].text, plain.choices[0].text);
});

test('malformed requests get OpenAI error objects (raw HTTP)', async () => {
  const post = (path, body, headers = {}) => fetch(`${main.url}${path}`, {
    method: 'POST', body, headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json', ...headers },
    signal: AbortSignal.timeout(10000),
  });
  const cases = [
    ['/v1/completions', '{"prompt": "x", ', 400],
    ['/v1/completions', '[1, 2]', 400],
    ['/v1/completions', '{"prompt": 5}', 400],
    ['/v1/completions', '{"prompt": "x", "max_tokens": 1e12}', 400],
    ['/v1/completions', '{"prompt": "x", "stop": [1]}', 400],
    ['/v1/completions', '{"prompt": [1, -3]}', 400],
    ['/v1/completions', '{"prompt": [1, 99999]}', 400],
    ['/v1/chat/completions', '{"messages": []}', 400],
    ['/v1/chat/completions', '{"messages": [{"role": "wizard", "content": "x"}]}', 400],
    ['/v1/completions', JSON.stringify({ prompt: 'x'.repeat(2 << 20) }), 413],
    ['/v1/nothing', '{}', 404],
  ];
  for (const [path, body, status] of cases) {
    const r = await post(path, body);
    assert.equal(r.status, status, `${path} ${body.slice(0, 60)}`);
    const j = await r.json();
    assert.equal(typeof j.error.message, 'string', JSON.stringify(j));
    assert.equal(typeof j.error.type, 'string');
  }
  const noKey = await fetch(`${main.url}/v1/models`, { signal: AbortSignal.timeout(10000) });
  assert.equal(noKey.status, 401);
  // The server still answers normally after all that.
  assert.equal((await greedy('In the beginning')).choices[0].finish_reason, 'length');
});

test('a client that disconnects mid-stream cancels its sequence', async () => {
  const before = await metrics(main.url);
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model: MODEL, prompt: 'And God said', max_tokens: 200, temperature: 0, stream: true, ignore_eos: true },
    { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const _ of stream) {
      chunks += 1;
      if (chunks === 3) controller.abort();  // the connection closes mid-stream
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
  }
  assert.ok(chunks >= 3 && chunks < 150, `${chunks} chunks arrived`);
  await waitFor(async () => {
    const m = await metrics(main.url);
    return m.turbokv_requests_cancelled_total > before.turbokv_requests_cancelled_total &&
      m.turbokv_kv_reserved_bytes === 0 && m.turbokv_requests_running === 0;
  }, 'the cancelled sequence to be freed');
});

test('a full queue answers 429 with Retry-After', async () => {
  const small = await startServer(['--model', MODEL, '--parallel', '1', '--max-queue', '1']);
  try {
    const c = new OpenAI({ baseURL: `${small.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 60000 });
    const results = await Promise.allSettled(Array.from({ length: 6 }, () =>
      c.completions.create({ model: MODEL, prompt: 'In the beginning', max_tokens: 240, temperature: 0, ignore_eos: true })));
    const rejected = results.filter((r) => r.status === 'rejected');
    const ok = results.filter((r) => r.status === 'fulfilled');
    assert.ok(ok.length >= 2, `${ok.length} succeeded`);
    assert.ok(rejected.length >= 1, 'nothing was rejected');
    for (const r of rejected) {
      assert.ok(r.reason instanceof OpenAI.RateLimitError, String(r.reason));
      assert.equal(r.reason.headers['retry-after'], '1');
    }
    assert.equal((await metrics(small.url)).turbokv_requests_rejected_total, rejected.length);
  } finally {
    await stopServer(small);
  }
});
