#!/usr/bin/python3
"""turbokv against llama.cpp on random-weight GGUFs (issue 27); driven by scripts/compare-llamacpp.sh.

Subcommands:
  write FAMILY OUT.gguf [--type f32|f16|q8_0]   a random-weight GGUF of the family, written with
                                                llama.cpp's own gguf-py (PYTHONPATH=<llama.cpp>/gguf-py)
  ids LOGITS_FILE OUT.ids                       the token stream of a llama-perplexity
                                                --kl-divergence-base file, as turbokv eval --ids reads it
  compare LLAMA_FILE TURBOKV_FILE               top-1 agreement, KL(llama.cpp || turbokv), entropies and
                                                the perplexities both files imply, as one JSON line
  families [--all]                              the default family names, one a line (--all: and
                                                those run only by name)

Both logits files are in llama-perplexity's format (engine/eval/llama_logits_file.hpp describes it):
turbokv eval --logits-out writes the same one, so one reader serves both.

The vocabulary is the project's tok512 (SentencePiece, models/tok512.bin) in a `llama` tokenizer
model, as llama.cpp's convert-llama2c writes it; llama-perplexity tokenizes the text and turbokv is
given llama.cpp's token ids, so no tokenizer agreement is needed for the comparison.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOK512 = os.path.join(HERE, "..", "models", "tok512.bin")

# Small but representative shapes. Every file: 512 tokens of vocabulary, context_length 512 (the
# comparison runs windows of 128, so a window of 32 slides within it), GQA where the family has it.
# `window`: attention.sliding_window. Logit scale `out_std` ~ 4 keeps the distributions peaked
# (entropy well below log 512 = 6.24 nats) so top-1 agreement means something.
FAMILIES = {
    # the control: Llama 3 shape (adjacent-pair RoPE, base 500,000), untied output
    "llama": dict(arch="llama", dim=128, ff=256, layers=4, heads=4, kv=2, hd=32, tied=False, base=500000.0),
    # Mistral 7B v0.1's sliding_window 4096: llama.cpp's llama graph does not read the key (no SWA for
    # `llama`), turbokv honours it; a window above the context makes both the same model
    "mistral": dict(arch="llama", dim=128, ff=256, layers=4, heads=4, kv=2, hd=32, tied=False, base=10000.0,
                    window=4096),
    # the same with a window inside the context: shows that difference (not a bar to meet)
    "mistral-w32": dict(arch="llama", dim=128, ff=256, layers=4, heads=4, kv=2, hd=32, tied=False, base=10000.0,
                        window=32),
    # Gemma 2: even layers slide (window 32), attention and final-logit soft-caps that bite
    "gemma2": dict(arch="gemma2", dim=128, ff=256, layers=4, heads=4, kv=2, hd=64, tied=True, base=10000.0,
                   window=32, attn_cap=10.0, final_cap=10.0),
    # Gemma 3: 5 sliding (window 32, base 10,000) to 1 global (base 1e6, linear x8), head_dim 256, QK norms
    "gemma3": dict(arch="gemma3", dim=128, ff=256, layers=6, heads=2, kv=1, hd=256, tied=True, base=1000000.0,
                   window=32, linear=8.0),
    # Phi-3: fused qkv and gate-up; sliding_window 2047 as Phi-3-mini-4k (llama.cpp disables Phi SWA)
    "phi3": dict(arch="phi3", dim=128, ff=256, layers=4, heads=4, kv=2, hd=32, tied=False, base=10000.0,
                 window=2047),
    # Phi-3-mini-128k's LongRoPE (rope_factors_long/short, attention factor), run by name only (not
    # in the default list: turbokv refuses LongRoPE until it lands). original_context_length 64, so
    # that at the comparison's 128 positions llama.cpp picks the long factors (it does above it).
    "phi3-longrope": dict(arch="phi3", dim=128, ff=256, layers=4, heads=4, kv=2, hd=32, tied=False, base=10000.0,
                          window=262144, longrope=64, extra=True),
    "olmo2": dict(arch="olmo2", dim=128, ff=256, layers=4, heads=4, kv=2, hd=32, tied=False, base=500000.0),
    # Granite 3's multipliers (attention.scale 1/head_dim as Granite 3's 1/128 at head_dim 128)
    "granite": dict(arch="granite", dim=128, ff=256, layers=4, heads=4, kv=2, hd=64, tied=False, base=10000.0,
                    granite=True),
    # Qwen 3: q_dim (4 x 64) wider than dim, per-head QK norms, NeoX RoPE
    "qwen3": dict(arch="qwen3", dim=128, ff=256, layers=4, heads=4, kv=2, hd=64, tied=False, base=1000000.0),
    # Qwen 3 MoE: 8 experts of width 64, top-2 with renormalised softmax
    "qwen3moe": dict(arch="qwen3moe", dim=128, ff=256, layers=4, heads=4, kv=2, hd=64, tied=False, base=1000000.0,
                     experts=8, used=2, expert_ff=64),
}


def read_tok512():
    """llama2.c tokenizer file: int32 max length, then per token float32 score, int32 length, bytes."""
    with open(TOK512, "rb") as f:
        data = f.read()
    pos = 4
    pieces, scores = [], []
    while pos < len(data):
        score, n = struct.unpack_from("<fi", data, pos)
        pos += 8
        pieces.append(data[pos:pos + n].decode("utf-8"))
        pos += n
        scores.append(score)
    return pieces, scores


def add_vocab(w, gguf):
    pieces, scores = read_tok512()
    tokens, types = [], []
    for i, p in enumerate(pieces):
        if i == 0:
            t = gguf.TokenType.UNKNOWN
        elif i in (1, 2):
            t = gguf.TokenType.CONTROL
        elif len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            t = gguf.TokenType.BYTE
        else:
            t = gguf.TokenType.NORMAL
        if i in (1, 2):  # tok512 spells them "\n<s>\n"; llama.cpp looks "</s>" up by name (Phi-3)
            p = ("<s>", "</s>")[i - 1]
        tokens.append(p.replace(" ", "\u2581"))  # llama2.c stores SentencePiece's U+2581 as a space
        types.append(t)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    return len(tokens)


def write_family(name, path, wtype, seed=27):
    import gguf  # llama.cpp's gguf-py, from PYTHONPATH
    f = FAMILIES[name]
    arch = f["arch"]
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    w = gguf.GGUFWriter(path, arch)
    dim, ff, layers, heads, kv, hd = f["dim"], f["ff"], f["layers"], f["heads"], f["kv"], f["hd"]
    # No family in the name: llama.cpp sets Phi-3's special-token attributes by general.name and
    # then needs "<|endoftext|>" in the vocabulary.
    w.add_name("turbokv random-weight comparison model")
    # LongRoPE: a 32x context over the original one, the attention factor as llama.cpp's converter
    # computes it for `longrope` (conversion/phi.py)
    orig = f.get("longrope")
    w.add_context_length(32 * orig if orig else 512)
    if orig:
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(32) / math.log(orig)))
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ff)
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(f["base"])
    w.add_layer_norm_rms_eps(1e-6)
    if "window" in f:
        w.add_sliding_window(f["window"])
    if "attn_cap" in f:
        w.add_attn_logit_softcapping(f["attn_cap"])
        w.add_final_logit_softcapping(f["final_cap"])
    if "linear" in f:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(f["linear"])
    logit_gain = 1.0
    if f.get("granite"):
        w.add_embedding_scale(12.0)
        w.add_residual_scale(0.22)
        w.add_logit_scale(8.0)
        w.add_attention_scale(1.0 / hd)
        logit_gain = 8.0  # the logits are divided by logit_scale
    if "experts" in f:
        w.add_expert_count(f["experts"])
        w.add_expert_used_count(f["used"])
        w.add_expert_feed_forward_length(f["expert_ff"])
    vocab = add_vocab(w, gguf)
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "q8_0": gguf.GGMLQuantizationType.Q8_0}[wtype]

    def matrix(tname, shape, std):
        a = (std * rng.standard_normal(shape)).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(tname, a)
        else:
            w.add_tensor(tname, gguf.quants.quantize(a, qtype), raw_dtype=qtype)

    def vector(tname, n, mean=1.0, std=0.1):
        w.add_tensor(tname, (mean + std * rng.standard_normal(n)).astype(np.float32))

    qd, kvd = heads * hd, kv * hd
    out_std = 4.0 * logit_gain / math.sqrt(dim)  # final-normed rows of rms ~1: logits of std ~4
    # q and k weights large enough that attention is peaked (score std ~2), not uniform
    qk_std = 1.5 / math.sqrt(dim)
    gemma = arch in ("gemma2", "gemma3")
    # Tied output (Gemma): rows of std out_std, so the logits have std ~4 as the untied ones. The
    # token's own embedding then scores its own logit high; Gemma's post-norm weights (mean 8
    # below) make the blocks' outputs dominate the residual stream, so the model does not just
    # predict its input token. Granite multiplies the embeddings by 12: rows of std 0.1.
    embd_std = out_std if f["tied"] else (0.1 if f.get("granite") else 1.0)
    matrix("token_embd.weight", (vocab, dim), embd_std)
    vector("output_norm.weight", dim)
    if not f["tied"]:
        matrix("output.weight", (vocab, dim), out_std)
    if orig:  # per rotated pair: long factors rising to 24, short ones near 1
        pairs = hd // 2
        w.add_tensor("rope_factors_long.weight", np.geomspace(1.0, 24.0, pairs).astype(np.float32))
        w.add_tensor("rope_factors_short.weight", np.linspace(1.0, 1.3, pairs).astype(np.float32))
    for l in range(layers):
        b = f"blk.{l}."
        if arch != "olmo2":
            vector(b + "attn_norm.weight", dim)
        if arch == "phi3":
            a_q = (qk_std * rng.standard_normal((qd + kvd, dim))).astype(np.float32)
            a_v = (rng.standard_normal((kvd, dim)) / math.sqrt(dim)).astype(np.float32)
            fused = np.concatenate([a_q, a_v])
            if qtype == gguf.GGMLQuantizationType.F32:
                w.add_tensor(b + "attn_qkv.weight", fused)
            else:
                w.add_tensor(b + "attn_qkv.weight", gguf.quants.quantize(fused, qtype),
                             raw_dtype=qtype)
        else:
            matrix(b + "attn_q.weight", (qd, dim), qk_std)
            matrix(b + "attn_k.weight", (kvd, dim), qk_std)
            matrix(b + "attn_v.weight", (kvd, dim), 1.0 / math.sqrt(dim))
        matrix(b + "attn_output.weight", (dim, qd), 1.0 / math.sqrt(qd))
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            vector(b + "attn_q_norm.weight", hd, 2.0, 0.2)
            vector(b + "attn_k_norm.weight", hd, 1.0, 0.1)
        if arch == "olmo2":  # over the whole projections
            vector(b + "attn_q_norm.weight", qd, 2.0, 0.2)
            vector(b + "attn_k_norm.weight", kvd, 1.0, 0.1)
        post = 8.0 if gemma else 1.0
        if gemma or arch == "olmo2":
            vector(b + "post_attention_norm.weight", dim, post, 0.1 * post)
        if arch != "olmo2":
            vector(b + "ffn_norm.weight", dim)
        if gemma or arch == "olmo2":
            vector(b + "post_ffw_norm.weight", dim, post, 0.1 * post)
        if "experts" in f:
            e, eff = f["experts"], f["expert_ff"]
            matrix(b + "ffn_gate_inp.weight", (e, dim), 2.0 / math.sqrt(dim))  # a router that prefers
            matrix(b + "ffn_gate_exps.weight", (e, eff, dim), 1.0 / math.sqrt(dim))
            matrix(b + "ffn_up_exps.weight", (e, eff, dim), 1.0 / math.sqrt(dim))
            matrix(b + "ffn_down_exps.weight", (e, dim, eff), 1.0 / math.sqrt(eff))
        elif arch == "phi3":  # gate rows, then up rows
            matrix(b + "ffn_up.weight", (2 * ff, dim), 1.0 / math.sqrt(dim))
            matrix(b + "ffn_down.weight", (dim, ff), 1.0 / math.sqrt(ff))
        else:
            matrix(b + "ffn_gate.weight", (ff, dim), 1.0 / math.sqrt(dim))
            matrix(b + "ffn_up.weight", (ff, dim), 1.0 / math.sqrt(dim))
            matrix(b + "ffn_down.weight", (dim, ff), 1.0 / math.sqrt(ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_logits_file(path):
    """(n_ctx, n_vocab, tokens, log-prob rows [positions, n_vocab], normalised) of a llama-perplexity file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"_logits_":
        sys.exit(f"{path}: not a llama-perplexity logits file")
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", data, 8)
    pos = 20
    tokens = np.frombuffer(data, dtype="<i4", count=n_ctx * n_chunk, offset=pos)
    pos += 4 * n_ctx * n_chunk
    nv = 2 * ((n_vocab + 1) // 2) + 4
    per_chunk = n_ctx - 1 - n_ctx // 2
    n_rows = n_chunk * per_chunk
    rec = np.frombuffer(data, dtype="<u2", count=n_rows * nv, offset=pos).reshape(n_rows, nv)
    if pos + rec.nbytes != len(data):
        sys.exit(f"{path}: {len(data)} bytes, expected {pos + rec.nbytes}")
    head = rec[:, :4].copy().view("<f4")  # scale, floor
    logp = head[:, 1:2].astype(np.float64) + head[:, 0:1].astype(np.float64) * rec[:, 4:4 + n_vocab]
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))  # the floor tokens break the sum's 1 a little
    return n_ctx, n_vocab, tokens, logp


def targets(n_ctx, tokens):
    """The token each scored position predicts, in file order."""
    first = n_ctx // 2
    chunks = tokens.reshape(-1, n_ctx)
    return chunks[:, first + 1:].reshape(-1)


def compare(llama_path, turbokv_path):
    n_ctx, n_vocab, tok_a, a = read_logits_file(llama_path)
    n_ctx_b, n_vocab_b, tok_b, b = read_logits_file(turbokv_path)
    if (n_ctx, n_vocab) != (n_ctx_b, n_vocab_b) or not np.array_equal(tok_a, tok_b):
        sys.exit("the two files do not hold the same windows and tokens")
    t = targets(n_ctx, tok_a)
    rows = np.arange(len(t))
    pa = np.exp(a)
    kl = (pa * (a - b)).sum(axis=1)
    ent = -(pa * a).sum(axis=1)
    return {
        "positions": int(len(t)),
        "top1_agreement": float((a.argmax(axis=1) == b.argmax(axis=1)).mean()),
        "kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
        "entropy_mean": float(ent.mean()), "log_vocab": math.log(n_vocab),
        # from the files' log-probabilities, whose floor (16 nats below the best) caps each loss:
        # below the tools' own perplexities when targets fall under it
        "ppl_floored_llama_file": float(math.exp(-a[rows, t].mean())),
        "ppl_floored_turbokv_file": float(math.exp(-b[rows, t].mean())),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pw = sub.add_parser("write")
    pw.add_argument("family", choices=sorted(FAMILIES))
    pw.add_argument("out")
    pw.add_argument("--type", default="f32", choices=["f32", "f16", "q8_0"])
    pi = sub.add_parser("ids")
    pi.add_argument("logits")
    pi.add_argument("out")
    pc = sub.add_parser("compare")
    pc.add_argument("llama")
    pc.add_argument("turbokv")
    pf = sub.add_parser("families")
    pf.add_argument("--all", action="store_true", help="also those run only by name (phi3-longrope)")
    a = p.parse_args()
    if a.cmd == "write":
        write_family(a.family, a.out, a.type)
    elif a.cmd == "ids":
        _, _, tokens, _ = read_logits_file(a.logits)
        with open(a.out, "w") as f:
            f.write(" ".join(map(str, tokens.tolist())) + "\n")
    elif a.cmd == "compare":
        print(json.dumps(compare(a.llama, a.turbokv)))
    else:
        print("\n".join(n for n, f in FAMILIES.items() if a.all or not f.get("extra")))


if __name__ == "__main__":
    main()
