#!/usr/bin/env python3
"""Rewrites a llama GGUF (e.g. `turbokv convert models/kjv-llama-3M.bin kjv.gguf`) as a `phi3`
GGUF with LongRoPE, written with llama.cpp's own gguf-py the way its converter writes Phi-3.5 /
Phi-4-mini: fused attn_qkv and ffn_up (gate rows, then up rows), rope_factors_long/short,
rope.scaling.original_context_length, rope.scaling.attn_factor = sqrt(1 + ln(scale) /
ln(original)), optionally a partial rotary (rope.dimension_count < head size). It is the file on
which turbokv and llama.cpp are compared (docs/history/benchmarks-notebook.md, "LongRoPE").

Llama's q/k rows are in Meta's layout (RoPE on adjacent pairs); phi3 rotates halves (NeoX), so
each head's rows are reordered (even rows, then odd rows) and, with full rotary, the phi3 file
computes what the llama file did apart from the LongRoPE factors and magnitude.

Run with llama.cpp's gguf-py on the path:
  PYTHONPATH=/work/llama.cpp-new-src/gguf-py /usr/bin/python3 scripts/phi3-longrope-gguf.py IN OUT
"""
import argparse
import math

import numpy as np
import gguf


def field_value(field):
    return field.contents()


def copy_tokenizer(reader, writer):
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field_value(field), vtype, sub)


def neox_rows(w, heads, head_dim, rope_dims):
    """Per head: the rotary part's even rows, then its odd rows; the rest unchanged."""
    w = w.reshape(heads, head_dim, -1)
    rot = w[:, :rope_dims]
    rot = np.concatenate([rot[:, 0::2], rot[:, 1::2]], axis=1)
    return np.concatenate([rot, w[:, rope_dims:]], axis=1).reshape(heads * head_dim, -1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--context", type=int, default=1024, help="max_position_embeddings: phi3.context_length and the "
                    "attention factor's scale")
    ap.add_argument("--context-length", type=int, default=0,
                    help="write this phi3.context_length instead (<= the original context: the short set is the one "
                    "every context up to it takes, in both turbokv and llama.cpp)")
    ap.add_argument("--original-context", type=int, default=256, help="original_max_position_embeddings")
    ap.add_argument("--rope-dims", type=int, default=0, help="rotary dimensions per head (0: all)")
    args = ap.parse_args()

    r = gguf.GGUFReader(args.input)
    kv = {name: field_value(f) for name, f in r.fields.items() if name.startswith("llama.")}
    tensors = {t.name: np.array(t.data, dtype=np.float32) for t in r.tensors}
    dim, heads = int(kv["llama.embedding_length"]), int(kv["llama.attention.head_count"])
    kv_heads = int(kv.get("llama.attention.head_count_kv", heads))
    head_dim = dim // heads
    rope_dims = args.rope_dims or head_dim
    layers = int(kv["llama.block_count"])

    w = gguf.GGUFWriter(args.output, "phi3")
    w.add_context_length(args.context_length or args.context)
    w.add_rope_scaling_orig_ctx_len(args.original_context)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(int(kv["llama.feed_forward_length"]))
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(float(kv.get("llama.attention.layer_norm_rms_epsilon", 1e-5)))
    w.add_rope_dimension_count(rope_dims)
    w.add_rope_freq_base(float(kv.get("llama.rope.freq_base", 10000.0)))
    w.add_sliding_window(0)
    scale = args.context / args.original_context
    w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(args.original_context)))
    copy_tokenizer(r, w)

    w.add_tensor("token_embd.weight", tensors["token_embd.weight"])
    w.add_tensor("output_norm.weight", tensors["output_norm.weight"])
    if "output.weight" in tensors:
        w.add_tensor("output.weight", tensors["output.weight"])
    # Long factors rising from 1 to scale over the pairs (low frequencies stretched most, as in
    # Phi-3.5's), short ones near 1.
    pairs = np.arange(rope_dims // 2, dtype=np.float32) / max(rope_dims // 2 - 1, 1)
    w.add_tensor("rope_factors_long.weight", (1.0 + (scale - 1.0) * pairs ** 2).astype(np.float32))
    w.add_tensor("rope_factors_short.weight", (1.0 + 0.1 * pairs).astype(np.float32))
    for l in range(layers):
        b = f"blk.{l}."
        q = neox_rows(tensors[b + "attn_q.weight"], heads, head_dim, rope_dims)
        k = neox_rows(tensors[b + "attn_k.weight"], kv_heads, head_dim, rope_dims)
        w.add_tensor(b + "attn_norm.weight", tensors[b + "attn_norm.weight"])
        w.add_tensor(b + "attn_qkv.weight", np.concatenate([q, k, tensors[b + "attn_v.weight"]], axis=0))
        w.add_tensor(b + "attn_output.weight", tensors[b + "attn_output.weight"])
        w.add_tensor(b + "ffn_norm.weight", tensors[b + "ffn_norm.weight"])
        w.add_tensor(b + "ffn_up.weight", np.concatenate([tensors[b + "ffn_gate.weight"], tensors[b + "ffn_up.weight"]], axis=0))
        w.add_tensor(b + "ffn_down.weight", tensors[b + "ffn_down.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
