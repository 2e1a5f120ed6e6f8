#!/usr/bin/env python3
"""Writes a random NVFP4 checkpoint (compressed-tensors, W4A4, one safetensors file) with Llama-3-8B's layer
shapes (hidden 4096, intermediate 14336, 32 layers, 32 query / 8 kv heads of 128) around the tokenizer and
config of an existing model directory (its vocabulary sets the embedding size; embeddings tied): for decode
speed measurements at a realistic size without downloading one (the generated text is noise).

    scripts/random_nvfp4_model.py SRC_MODEL_DIR OUT_DIR [--layers N]

Needs numpy. About 4.3 GB for a 49152-token vocabulary.
"""
import argparse, json, os, shutil, struct
import numpy as np

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("src", help="model directory whose config.json and tokenizer files are reused")
ap.add_argument("out", help="output directory (created)")
ap.add_argument("--layers", type=int, default=32)
a = ap.parse_args()
src, out = a.src, a.out
cfg0 = json.load(open(os.path.join(src, "config.json")))
H, I, L, NH, NKV, HD, V = 4096, 14336, a.layers, 32, 8, 128, int(cfg0["vocab_size"])
rng = np.random.default_rng(1)
cfg = dict(cfg0)
cfg.update(hidden_size=H, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
           num_key_value_heads=NKV, head_dim=HD, vocab_size=V, rope_theta=500000.0, tie_word_embeddings=True,
           torch_dtype="bfloat16", nvfp4_source="random (scripts/random_nvfp4_model.py)")
cfg["quantization_config"] = {
    "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
    "quantization_status": "compressed",
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                    "symmetric": True, "dynamic": False, "scale_dtype": "torch.float8_e4m3fn"},
        "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                              "symmetric": True, "dynamic": "local", "scale_dtype": "torch.float8_e4m3fn"}}}}
os.makedirs(out, exist_ok=True)
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"):
    if os.path.exists(os.path.join(src, f)):
        shutil.copy(os.path.join(src, f), out)
def bf16(a):
    return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)
tensors = []  # (name, dtype, shape, producer)
tensors.append(("model.embed_tokens.weight", "BF16", [V, H], lambda: bf16(rng.standard_normal((V, H), np.float32) * 0.02)))
tensors.append(("model.norm.weight", "BF16", [H], lambda: bf16(np.ones(H, np.float32))))
lin = {"self_attn.q_proj": (NH * HD, H), "self_attn.k_proj": (NKV * HD, H), "self_attn.v_proj": (NKV * HD, H),
       "self_attn.o_proj": (H, NH * HD), "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}
for l in range(L):
    p = "model.layers.%d." % l
    tensors.append((p + "input_layernorm.weight", "BF16", [H], lambda: bf16(np.ones(H, np.float32))))
    tensors.append((p + "post_attention_layernorm.weight", "BF16", [H], lambda: bf16(np.ones(H, np.float32))))
    for m, (n, k) in lin.items():
        q = p + m + "."
        tensors.append((q + "weight_packed", "U8", [n, k // 2], lambda n=n, k=k: rng.integers(0, 256, (n, k // 2), np.uint8)))
        # E4M3 scales 0x28..0x37: 0.125 .. 0.9375 (no NaN, no zero)
        tensors.append((q + "weight_scale", "F8_E4M3", [n, k // 16], lambda n=n, k=k: rng.integers(0x28, 0x38, (n, k // 16), np.uint8)))
        tensors.append((q + "weight_global_scale", "F32", [1], lambda: np.array([2688.0 / 0.05], np.float32)))
        tensors.append((q + "input_global_scale", "F32", [1], lambda: np.array([2688.0 / 8.0], np.float32)))
tensors.sort(key=lambda t: t[0])
size = {"BF16": 2, "U8": 1, "F8_E4M3": 1, "F32": 4}
hdr, off = {"__metadata__": {"format": "pt"}}, 0
for name, dt, shape, _ in tensors:
    nb = int(np.prod(shape)) * size[dt]
    hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
    off += nb
h = json.dumps(hdr).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    for name, dt, shape, make in tensors:
        a = np.ascontiguousarray(make())
        assert a.nbytes == int(np.prod(shape)) * size[dt], name
        f.write(a.tobytes())
print("%s: %d tensors, %.2f GB" % (os.path.join(out, "model.safetensors"), len(tensors), off / 1e9))
