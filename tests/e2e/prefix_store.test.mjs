// End-to-end tests of the shared prefix store: a redis-server (no persistence) and two
// `turbokv serve` replicas A and B on it, then nginx round-robin in front of them. All started
// here on 127.0.0.1 with free ports and temporary files, and stopped at the end, also on
// failure. Run: node --test tests/e2e/prefix_store.test.mjs (ctest runs it; TURBOKV_TOOL names
// the binary, TURBOKV_REDIS_SERVER / TURBOKV_REDIS_CLI / TURBOKV_NGINX the services).
//
// Model: stories260K (context 512, tok512) with 8-token blocks; kjv-llama-3M (the same
// tokenizer, other weights) plays "another model" whose values must be refused.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort, startChild, startServe, stop, killAll, metrics } from './serve_helpers.mjs';

const REDIS_SERVER = process.env.TURBOKV_REDIS_SERVER ?? 'redis-server';
const REDIS_CLI = process.env.TURBOKV_REDIS_CLI ?? 'redis-cli';
const NGINX = process.env.TURBOKV_NGINX ?? 'nginx';
const MODEL = 'stories260K.bin';
const OTHER_MODEL = 'kjv-llama-3M.bin';
const BLOCK = 8;
const run = promisify(execFile);

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'turbokv-prefix-store-'));
fs.chmodSync(tmp, 0o777);  // nginx workers may run as another user

let redisPort;
let redis;

async function startRedis() {
  redisPort = await freePort();
  redis = startChild(REDIS_SERVER, ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no', '--dir', tmp, '--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru'],
  (o) => o.includes('Ready to accept connections'), 'redis-server');
  await redis.started;
}

async function redisCli(...args) {
  const { stdout } = await run(REDIS_CLI, ['-h', '127.0.0.1', '-p', String(redisPort), ...args], { timeout: 10000 });
  return stdout;
}

async function prefixKeys() {
  return new Set((await redisCli('--scan', '--pattern', 'tkv:p1:*')).split('\n').filter((k) => k));
}

function startServer(model = MODEL) {
  return startServe(['--model', model, '--kv-page-tokens', String(BLOCK),
    '--kv-budget', '64MiB', '--threads', '1', '--prefix-store', `redis://127.0.0.1:${redisPort}`,
    // Each store call (connect, command, reply) must finish within this as a whole: 250 ms, not
    // the 50 ms default, so a loaded CI machine or the sanitizer build does not turn hits into misses.
    '--prefix-store-timeout', '250']);
}

async function post(url, route, body) {
  const r = await fetch(`${url}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(60000),
  });
  const json = await r.json();
  assert.equal(r.status, 200, JSON.stringify(json));
  return json;
}

const complete = (url, prompt, max_tokens = 16, model = MODEL) =>
  post(url, '/v1/completions', { model, prompt, max_tokens, temperature: 0 });

// Waits until the server's queued writes have all been attempted.
async function writesSettled(url) {
  for (let i = 0; i < 400; i += 1) {
    const m = await metrics(url);
    const done = m.turbokv_prefix_store_writes_total + m.turbokv_prefix_store_writes_failed_total +
      m.turbokv_prefix_store_writes_dropped_total;
    if (done >= m.turbokv_prefix_store_offers_total) return m;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail('prefix store writes did not settle');
}

const story = (n) => Array.from({ length: n }, (_, i) =>
  `Once upon a time, in a little town number ${i}, there lived a girl named Lily who loved to play in the park with her red ball.`).join(' ');

let A;
let B;

before(async () => {
  await startRedis();
  [A, B] = await Promise.all([startServer(), startServer()]);
});

after(async () => {
  killAll();
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('B restores what A computed, computes at most one block, answers the same; again after A restarts', async () => {
  const prompt = story(8);
  const a = await complete(A.url, prompt);
  assert.equal(a.usage.prompt_tokens_details.store_tokens, 0);
  assert.ok(a.usage.prompt_tokens > 200, `prompt of ${a.usage.prompt_tokens} tokens`);
  const ma = await writesSettled(A.url);
  assert.ok(ma.turbokv_prefix_store_writes_total >= 1);

  const b = await complete(B.url, prompt);
  assert.equal(b.choices[0].text, a.choices[0].text);
  assert.ok(b.usage.prompt_tokens - b.usage.prompt_tokens_details.cached_tokens <= BLOCK, JSON.stringify(b.usage));
  assert.equal(b.usage.prompt_tokens_details.store_tokens, b.usage.prompt_tokens_details.cached_tokens);
  const mb = await metrics(B.url);
  assert.equal(mb.turbokv_prompt_tokens_store_total, b.usage.prompt_tokens_details.store_tokens);
  assert.equal(mb.turbokv_prefix_store_hits_total, 1);

  // A restarts (its in-process cache is gone; the store outlived it).
  assert.equal((await stop(A)).code, 0);
  A = await startServer();
  const again = await complete(A.url, prompt);
  assert.equal(again.choices[0].text, a.choices[0].text);
  assert.ok(again.usage.prompt_tokens - again.usage.prompt_tokens_details.store_tokens <= BLOCK,
    JSON.stringify(again.usage));
});

test('garbage, truncated and another model\'s values are refused, counted and recomputed', async () => {
  const other = await startServer(OTHER_MODEL);
  try {
    const cases = ['garbage', 'truncated', 'another model'];
    for (const [i, what] of cases.entries()) {
      // A prompt of its own per case (no replica has it in its in-process cache).
      const prompt = `${what}: ${story(4).replaceAll('Lily', `Lily${i}`)}`;
      const before = await prefixKeys();
      const a = await complete(A.url, prompt);
      await writesSettled(A.url);
      const mine = [...await prefixKeys()].filter((k) => !before.has(k));
      assert.ok(mine.length >= 1, `${what}: A stored nothing`);
      let theirs = null;
      if (what === 'another model') {
        // The same prompt on another model's server: its value is copied under A's keys.
        const seen = await prefixKeys();
        await complete(other.url, prompt, 4, OTHER_MODEL);
        await writesSettled(other.url);
        [theirs] = [...await prefixKeys()].filter((k) => !seen.has(k));
        assert.ok(theirs, 'the other model stored nothing');
      }
      for (const key of mine) {
        if (what === 'garbage') {
          await redisCli('SET', key, 'not a turbokv prefix at all');
        } else if (what === 'truncated') {
          await redisCli('EVAL', "return redis.call('SET', KEYS[1], string.sub(redis.call('GET', KEYS[1]), 1, 300))", '1', key);
        } else {
          await redisCli('EVAL', "return redis.call('SET', KEYS[2], redis.call('GET', KEYS[1]))", '2', theirs, key);
        }
      }
      const m0 = await metrics(B.url);
      const b = await complete(B.url, prompt);
      const m1 = await metrics(B.url);
      assert.equal(b.choices[0].text, a.choices[0].text, what);
      assert.equal(b.usage.prompt_tokens_details.cached_tokens, 0, what);
      assert.ok(m1.turbokv_prefix_store_rejected_total > m0.turbokv_prefix_store_rejected_total, what);
      await writesSettled(B.url);  // B's own result replaces the bad value
    }
  } finally {
    await stop(other);
  }
});

test('nginx round-robin: a four-turn chat alternating replicas reuses >= 90% of each prompt from turn 2', async (t) => {
  const port = await freePort();
  const upA = new URL(A.url).port;
  const upB = new URL(B.url).port;
  const conf = path.join(tmp, 'nginx.conf');
  fs.writeFileSync(conf, `
worker_processes 1;
daemon off;
pid ${tmp}/nginx.pid;
error_log stderr warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path ${tmp}/body;
  proxy_temp_path ${tmp}/proxy;
  fastcgi_temp_path ${tmp}/fastcgi;
  uwsgi_temp_path ${tmp}/uwsgi;
  scgi_temp_path ${tmp}/scgi;
  upstream replicas { server 127.0.0.1:${upA}; server 127.0.0.1:${upB}; }
  server {
    listen 127.0.0.1:${port};
    location / { proxy_pass http://replicas; proxy_read_timeout 60s; }
  }
}
`);
  const nginx = startChild(NGINX, ['-p', tmp, '-c', conf, '-e', 'stderr'], () => false, 'nginx', 2000);
  nginx.started.catch(() => {});
  try {
    const lb = `http://127.0.0.1:${port}`;
    // Up once the port answers.
    let up = false;
    for (let i = 0; i < 200 && !up; i += 1) {
      up = await fetch(`${lb}/health`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok, () => false);
      if (!up) await new Promise((r) => setTimeout(r, 25));
    }
    assert.ok(up, `nginx did not come up: ${nginx.output()}`);
    const before = await Promise.all([metrics(A.url), metrics(B.url)]);
    const messages = [{ role: 'system', content: story(8) }];
    const usages = [];
    const questions = ['Who is Lily?', 'Where does she play?', 'What is red?', 'How does it end?'];
    for (const [turn, q] of questions.entries()) {
      messages.push({ role: 'user', content: q });
      const r = await post(lb, '/v1/chat/completions', { model: MODEL, messages, max_tokens: 8, temperature: 0 });
      const u = r.usage;
      usages.push(u);
      t.diagnostic(`turn ${turn + 1}: ${u.prompt_tokens} prompt tokens, ${u.prompt_tokens_details.cached_tokens} reused ` +
        `(${u.prompt_tokens_details.store_tokens} from Redis)`);
      if (turn > 0) {
        assert.ok(u.prompt_tokens_details.cached_tokens >= 0.9 * u.prompt_tokens,
          `turn ${turn + 1}: ${JSON.stringify(u)}`);
        // The other replica served the previous turn: the reuse came from the store.
        assert.ok(u.prompt_tokens_details.store_tokens >= 0.9 * u.prompt_tokens, `turn ${turn + 1}: ${JSON.stringify(u)}`);
      }
      messages.push({ role: 'assistant', content: r.choices[0].message.content });
      // The next turn may reach the other replica before this one's write is out; wait for it
      // (a real client thinks for longer than this).
      await Promise.all([writesSettled(A.url), writesSettled(B.url)]);
    }
    const after = await Promise.all([metrics(A.url), metrics(B.url)]);
    const served = after.map((m, i) => m.turbokv_requests_finished_total - before[i].turbokv_requests_finished_total);
    assert.deepEqual(served, [2, 2], 'round-robin: two turns on each replica');
  } finally {
    await stop(nginx);
  }
});

test('Redis frozen (SIGSTOP): lookups time out in tens of milliseconds, the request is computed', async () => {
  const prompt = `${story(5)} Frozen.`;
  const want = await complete(A.url, prompt, 8);
  const m0 = await metrics(B.url);
  redis.proc.kill('SIGSTOP');
  try {
    const t0 = Date.now();
    const b = await complete(B.url, prompt, 8);
    const seconds = (Date.now() - t0) / 1000;
    assert.equal(b.choices[0].text, want.choices[0].text);
    assert.equal(b.usage.prompt_tokens_details.store_tokens, 0);
    const m1 = await metrics(B.url);
    assert.ok(m1.turbokv_prefix_store_unavailable_total > m0.turbokv_prefix_store_unavailable_total, JSON.stringify(m1));
    assert.ok(seconds < 10, `took ${seconds} s`);
  } finally {
    redis.proc.kill('SIGCONT');
  }
});

test('Redis killed mid-run: requests still answer, computed, and the failures are counted', async () => {
  const prompt = story(2);
  const want = await complete(A.url, `${prompt} The end.`, 48);
  const inFlight = complete(B.url, prompt, 48);
  await stop(redis, 'SIGKILL');
  const r = await inFlight;
  assert.equal(r.choices[0].finish_reason, 'length');
  const b = await complete(B.url, `${prompt} The end.`, 48);
  assert.equal(b.choices[0].text, want.choices[0].text);
  const a = await complete(A.url, `${story(1)} Again.`, 8);
  assert.equal(a.choices.length, 1);
  const m = await metrics(B.url);
  assert.ok(m.turbokv_prefix_store_unavailable_total + m.turbokv_prefix_store_writes_failed_total >= 1, JSON.stringify(m));
  for (const s of [A, B]) assert.equal((await stop(s)).code, 0);
});
