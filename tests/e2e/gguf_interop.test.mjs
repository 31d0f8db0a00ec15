// GGUF interoperability with an implementation that is not turbokv's: Hugging Face's
// @huggingface/gguf (pinned in package-lock.json) reads the GGUF files `turbokv convert` writes,
// and serializes a header (metadata and tensor infos) that turbokv's reader must then load,
// giving the same greedy text as the original. Run: node --test tests/e2e/gguf_interop.test.mjs
// (ctest runs it; TURBOKV_TOOL names the binary, TURBOKV_MODELS_DIR the models).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gguf, buildGgufHeader, GGUFValueType, GGMLQuantizationType } from '@huggingface/gguf';

const TOOL = process.env.TURBOKV_TOOL ?? 'build/turbokv';
const MODELS = process.env.TURBOKV_MODELS_DIR ?? new URL('../../models', import.meta.url).pathname;
let dir;

function turbokv(args) {
  return execFileSync(TOOL, args, { encoding: 'utf8', timeout: 120000, stdio: ['ignore', 'pipe', 'pipe'] });
}

function convert(type) {
  const path = join(dir, `kjv-${type}.gguf`);
  turbokv(['convert', join(MODELS, 'kjv-llama-3M.bin'), path, '--type', type]);
  return path;
}

before(() => { dir = mkdtempSync(join(tmpdir(), 'turbokv-gguf-interop-')); });
after(() => { rmSync(dir, { recursive: true, force: true }); });

// Bytes of a tensor of `type` and shape (row length first), for the types convert writes here.
function tensorBytes(info) {
  const n = info.shape.reduce((a, b) => a * Number(b), 1);
  if (info.dtype === GGMLQuantizationType.F32) return 4 * n;
  if (info.dtype === GGMLQuantizationType.F16) return 2 * n;
  if (info.dtype === GGMLQuantizationType.Q8_0) return (n / 32) * 34;
  throw new Error(`unexpected type ${info.dtype} of ${info.name}`);
}

for (const type of ['f32', 'q8_0']) {
  test(`@huggingface/gguf reads the ${type} GGUF that turbokv convert writes`, async () => {
    const path = convert(type);
    const r = await gguf(path, { allowLocalFile: true, computeParametersCount: true });
    const m = r.metadata;
    assert.equal(m.version, 3);
    assert.equal(m['general.architecture'], 'llama');
    // The models README's llama2.c header: dim 256, hidden 704, 4 layers, 4 heads, 2 kv heads,
    // vocab 512, seq_len 256; 3,082,496 parameters (the classifier shares the embedding).
    assert.equal(m['llama.embedding_length'], 256);
    assert.equal(m['llama.feed_forward_length'], 704);
    assert.equal(m['llama.block_count'], 4);
    assert.equal(m['llama.attention.head_count'], 4);
    assert.equal(m['llama.attention.head_count_kv'], 2);
    assert.equal(m['llama.context_length'], 256);
    assert.equal(m['llama.rope.freq_base'], 10000);
    assert.equal(m['tokenizer.ggml.tokens'].length, 512);
    assert.equal(r.parameterCount, 3082496);
    // token_embd, 9 tensors per layer, output_norm; norms F32, matrices of the asked type.
    assert.equal(r.tensorInfos.length, 1 + 4 * 9 + 1);
    const matrixType = type === 'f32' ? GGMLQuantizationType.F32 : GGMLQuantizationType.Q8_0;
    let end = 0n;
    const alignment = BigInt(m['general.alignment'] ?? 32);
    assert.equal(r.tensorDataOffset % alignment, 0n);
    for (const t of r.tensorInfos) {
      assert.equal(t.dtype, t.n_dims === 1 ? GGMLQuantizationType.F32 : matrixType, t.name);
      assert.equal(t.offset % alignment, 0n, t.name);
      assert.ok(t.offset >= end, `${t.name} overlaps the tensor before it`);
      end = t.offset + BigInt(tensorBytes(t));
    }
    assert.ok(r.tensorDataOffset + end <= BigInt(statSync(path).size), 'tensor data past the end of the file');
  });
}

test('turbokv reads a GGUF whose header @huggingface/gguf serialized, with the same greedy text', async () => {
  const path = convert('q8_0');
  const bytes = readFileSync(path);
  const r = await gguf(path, { allowLocalFile: true, typedMetadata: true });
  const meta = r.typedMetadata;
  // A longer name and a new key: the header changes length, so the data section moves.
  meta['general.name'] = { type: GGUFValueType.STRING, value: 'kjv-llama-3M, header rewritten by @huggingface/gguf' };
  meta['interop.note'] = { type: GGUFValueType.STRING, value: 'written by another implementation' };
  const header = await buildGgufHeader(new Blob([bytes]), meta, {
    littleEndian: r.littleEndian, tensorInfoByteRange: r.tensorInfoByteRange, alignment: 32,
  });
  const headerBytes = new Uint8Array(await header.arrayBuffer());
  assert.notEqual(headerBytes.length, Number(r.tensorDataOffset));
  const rewritten = join(dir, 'rewritten.gguf');
  writeFileSync(rewritten, Buffer.concat([headerBytes, bytes.subarray(Number(r.tensorDataOffset))]));
  // The rewritten file parses back with the new key (their reader, their writer) ...
  const back = await gguf(rewritten, { allowLocalFile: true });
  assert.equal(back.metadata['interop.note'], 'written by another implementation');
  assert.equal(back.tensorInfos.length, r.tensorInfos.length);
  // ... and turbokv generates exactly what it generates from the original.
  // (The text is what comes before the statistics block, which starts with a '---' line.)
  const args = ['--prompt', 'In the beginning', '-n', '40', '--temp', '0'];
  const text = (model) => turbokv(['generate', '--model', model, ...args]).split('\n---\n')[0];
  const original = text(path);
  assert.ok(original.startsWith('In the beginning') && original.length > 60, original);
  assert.equal(text(rewritten), original);
});
