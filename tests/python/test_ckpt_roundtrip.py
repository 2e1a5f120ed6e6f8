#!/usr/bin/env python3
"""Checkpoint round trip through the command line, checked against an independent numpy implementation.

1. A tiny bf16 Llama-like model is written with the `safetensors` package.
2. `nvfp4 quantize --scheme nvfp4` (compressed-tensors) must produce, bit for bit, what a numpy port of
   SPEC §3 produces (codes, block scales, global scales; q/k/v and gate/up sharing one global scale), in a
   file the `safetensors` package itself opens.
3. `nvfp4 quantize --format modelopt` converts it: codes and block scales byte for byte, scalars f32(1/x).
4. `nvfp4 inspect --json` reports both correctly.
5. `nvfp4 linear` on both checkpoints, in all three semantics, agrees with a numpy f64 reference of SPEC §4/§5
   within the derived bound (see bound()).
argv: nvfp4 binary, tests/data dir. Exit 77 (skip) when numpy/ml_dtypes/safetensors are missing.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import ml_dtypes
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}")
    sys.exit(77)

BIN = os.path.abspath(sys.argv[1])
BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
f32 = np.float32


# ---- independent numpy port of SPEC §1/§3/§4 -----------------------------------------------------------
def bf16(x):
    return np.asarray(x, f32).astype(BF16).astype(f32)


def e4m3_bytes(x):
    return np.clip(np.asarray(x, f32), -448, 448).astype(E4M3).view(np.uint8)


def e4m3_val(b):
    return np.asarray(b, np.uint8).view(E4M3).astype(f32)


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], f32)


def e2m1_encode(y):
    a = np.abs(y)
    # SPEC §1 interval table: closed intervals go to the even code.
    idx = np.select(
        [a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0],
        [0, 1, 2, 3, 4, 5, 6], 7).astype(np.uint8)
    return idx | (np.signbit(y).astype(np.uint8) << 3)


def e2m1_decode(c):
    v = E2M1[c & 7]
    return np.where(c & 8, -v, v).astype(f32)


def pack(codes):  # (R, K) -> (R, K/2), element 2j in the low nibble
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def unpack(b):
    out = np.empty((b.shape[0], b.shape[1] * 2), np.uint8)
    out[:, 0::2] = b & 0xF
    out[:, 1::2] = b >> 4
    return out


def ct_global_enc(amax):  # T = bf16
    # compressed-tensors computes 2688 / amax on a bf16 tensor; torch evaluates scalar / tensor as
    # tensor.reciprocal() * scalar, each step rounded to bf16 (amax first clamped to bf16's smallest normal).
    a = max(f32(amax), f32(2.0 ** -126))
    with np.errstate(over="ignore"):
        g = bf16(bf16(f32(1) / a) * f32(2688.0))
    return f32(1.0) if not np.isfinite(g) else f32(g)


def ct_quantize(w, gs):
    r, k = w.shape
    g = w.reshape(r, k // 16, 16)
    amax_g = np.abs(g).max(axis=2)
    s = e4m3_bytes(f32(gs) * bf16(amax_g / f32(6)))
    s = np.where(s == 0, np.uint8(0x20), s)
    t = (e4m3_val(s) / f32(gs)).astype(f32)
    y = np.clip((g / t[:, :, None]).astype(f32), -6, 6)
    return pack(e2m1_encode(y).reshape(r, k)), s


def quantize_act(x, gs):
    m, k = x.shape
    g = x.reshape(m, k // 16, 16).astype(f32)
    vmax = np.abs(g).max(axis=2)
    sixth = np.frombuffer(struct.pack("<I", 0x3E2AAAAB), f32)[0]
    s8 = e4m3_bytes(f32(gs) * (vmax * sixth).astype(f32))
    sv = e4m3_val(s8)
    inv_gs = f32(1) / f32(gs)
    with np.errstate(divide="ignore"):
        os_ = np.where(s8 == 0, f32(0), f32(1) / (sv * inv_gs).astype(f32)).astype(f32)
    y = np.clip((g * os_[:, :, None]).astype(f32), -6, 6)
    return e2m1_encode(y).reshape(m, k), s8


def ref_linear(x, codes, scales, gs_w, gs_x, sem):
    """f64 value before the final rounding (SPEC §5), and the f64 sum of |terms| for the error bound."""
    wq = e2m1_decode(unpack(codes)).astype(np.float64)
    sw = np.repeat(e4m3_val(scales).astype(np.float64), 16, axis=1)
    dw = f32(1) / f32(gs_w)
    if sem == "w4a16":
        w = wq * sw
        acc = float(dw) * (x.astype(np.float64) @ w.T)
        mag = float(dw) * (np.abs(x.astype(np.float64)) @ np.abs(w).T)
    elif sem == "w4a4":
        qx, sx = quantize_act(x, gs_x)
        xd = e2m1_decode(qx).astype(np.float64) * np.repeat(e4m3_val(sx).astype(np.float64), 16, axis=1)
        alpha = float(f32(f32(1) / f32(gs_x)) * dw)
        w = wq * sw
        acc = alpha * (xd @ w.T)
        mag = alpha * (np.abs(xd) @ np.abs(w).T)
    else:  # w4a4-vllm: both operands dequantized and rounded to T first
        qx, sx = quantize_act(x, gs_x)
        xs = (e4m3_val(sx) / f32(gs_x)).astype(f32)
        xd = bf16(e2m1_decode(qx) * np.repeat(xs, 16, axis=1)).astype(np.float64)
        ws = (e4m3_val(scales) * dw).astype(f32)
        wd = bf16(e2m1_decode(unpack(codes)) * np.repeat(ws, 16, axis=1)).astype(np.float64)
        acc = xd @ wd.T
        mag = np.abs(xd) @ np.abs(wd).T
    return acc, mag


def bf16_ulp(v):
    v = np.maximum(np.abs(v), 2.0 ** -126)
    return np.exp2(np.floor(np.log2(v)) - 7)


def bound(acc, mag, bias, k):
    # An executor accumulating K products in f32 (any order) is within K·2^-24·Σ|terms| of the exact sum;
    # the output is then rounded to bf16 twice (T(acc), then T(T(acc) + bias)), each at most half an ulp
    # away from its argument, and the reference is rounded the same way: so at most E + 2 ulp apart.
    e = k * 2.0 ** -24 * mag
    return e + 2 * bf16_ulp(np.abs(acc) + np.abs(bias) + e)


# ---- plain file reader (independent of the project's) ----------------------------------------------------
DT = {"BF16": BF16, "F32": np.float32, "U8": np.uint8, "F8_E4M3": np.uint8, "F16": np.float16}


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    assert n % 8 == 0, "header not padded to 8 bytes"
    meta = h.pop("__metadata__", {})
    out = {}
    for name, e in h.items():
        s, t = e["data_offsets"]
        out[name] = (e["dtype"], np.frombuffer(b[8 + n + s:8 + n + t], DT[e["dtype"]]).reshape(e["shape"]))
    return out, meta


def run(*args, ok=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} -> {p.returncode}: {p.stderr}")
    return p


FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def main():
    rng = np.random.default_rng(7)
    H, I, V = 64, 128, 40
    tmp = tempfile.mkdtemp()
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    lin = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (32, H), "self_attn.v_proj": (32, H),
           "self_attn.o_proj": (H, H), "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}
    tensors, weights = {}, {}
    for layer in range(2):
        for i, (n, shp) in enumerate(lin.items()):
            name = f"model.layers.{layer}.{n}"
            w = (rng.standard_normal(shp) * (0.02 * (1 + (i + layer) % 3))).astype(BF16)
            tensors[name + ".weight"] = w
            weights[name] = w.astype(f32)
        tensors[f"model.layers.{layer}.input_layernorm.weight"] = np.ones(H, BF16)
    tensors["model.layers.0.self_attn.o_proj.bias"] = (rng.standard_normal(H) * 0.1).astype(BF16)
    tensors["model.embed_tokens.weight"] = rng.standard_normal((V, H)).astype(BF16)
    tensors["lm_head.weight"] = rng.standard_normal((V, H)).astype(BF16)
    save_file(tensors, os.path.join(src, "model.safetensors"))
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
               "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "vocab_size": V}, open(os.path.join(src, "config.json"), "w"))
    open(os.path.join(src, "tokenizer.json"), "w").write('{"x": 1}')
    calib = {name: float(1.0 + 0.5 * i) for i, name in enumerate(sorted(weights))}
    json.dump(calib, open(os.path.join(tmp, "calib.json"), "w"))

    ct, mo = os.path.join(tmp, "ct"), os.path.join(tmp, "mo")
    run("quantize", src, ct, "--scheme", "nvfp4", "--calib-amax", os.path.join(tmp, "calib.json"))
    run("quantize", ct, mo, "--format", "modelopt")

    # The safetensors package opens what we wrote (F8 tensors cannot be materialised by its numpy backend).
    with safe_open(os.path.join(ct, "model.safetensors"), "np") as f:
        check(f.metadata().get("format") == "pt", "metadata format pt")
        check("model.layers.0.mlp.up_proj.weight_packed" in f.keys(), "safetensors package lists packed weight")
        check(f.get_tensor("model.layers.0.mlp.up_proj.weight_global_scale").shape == (1,), "global scale [1]")
        check(np.array_equal(f.get_tensor("lm_head.weight").astype(f32), tensors["lm_head.weight"].astype(f32)),
              "lm_head copied")
    check(open(os.path.join(ct, "tokenizer.json")).read() == '{"x": 1}', "tokenizer copied")

    # Bit-exact against the numpy port, fused sets sharing one global scale.
    t_ct, _ = read_st(os.path.join(ct, "model.safetensors"))
    t_mo, _ = read_st(os.path.join(mo, "model.safetensors"))
    for layer in range(2):
        p = f"model.layers.{layer}."
        amax = {n: float(np.abs(weights[p + n]).max()) for n in lin}
        sets = {"self_attn.q_proj": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                "mlp.gate_proj": ["mlp.gate_proj", "mlp.up_proj"]}
        for n in lin:
            members = next((v for v in sets.values() if n in v), [n])
            gs = ct_global_enc(max(amax[m] for m in members))
            codes, scales = ct_quantize(weights[p + n], gs)
            name = p + n
            check(t_ct[name + ".weight_global_scale"][1][0] == gs, f"{name} global scale {gs} file {t_ct[name + '.weight_global_scale'][1][0]} amax {amax[n]}")
            check(np.array_equal(t_ct[name + ".weight_packed"][1], codes), f"{name} codes bit-exact")
            check(np.array_equal(t_ct[name + ".weight_scale"][1], scales), f"{name} block scales bit-exact")
            check(t_ct[name + ".input_global_scale"][1][0] == ct_global_enc(calib[name]), f"{name} input scale {ct_global_enc(calib[name])} file {t_ct[name + '.input_global_scale'][1][0]} calib {calib[name]}")
            # ModelOpt conversion: bytes copied, scalars f32(1/x).
            check(np.array_equal(t_mo[name + ".weight"][1], codes), f"{name} modelopt codes")
            check(np.array_equal(t_mo[name + ".weight_scale"][1], scales), f"{name} modelopt scales")
            check(t_mo[name + ".weight_scale_2"][1].shape == () and
                  t_mo[name + ".weight_scale_2"][1] == f32(1) / gs, f"{name} weight_scale_2 = 1/gs")
            check(t_mo[name + ".input_scale"][1] == f32(1) / t_ct[name + ".input_global_scale"][1][0],
                  f"{name} input_scale = 1/input_global_scale")

    # inspect --json
    for d, fmt in ((ct, "compressed-tensors"), (mo, "modelopt")):
        j = json.loads(run("inspect", d, "--json").stdout)
        check(j["format"] == fmt and j["scheme"] == "nvfp4", f"inspect {fmt}: format/scheme")
        check(j["linear_counts"] == {"none": 1, "nvfp4": 14}, f"inspect {fmt}: counts {j['linear_counts']}")
        check(j["problems"] == [], f"inspect {fmt}: problems {j['problems']}")
        by = {l["name"]: l for l in j["layers"]}
        check(by["model.layers.0.mlp.down_proj"]["in_features"] == I, f"inspect {fmt}: K of down_proj")
        check(by["model.layers.0.self_attn.o_proj"]["bias"] is True, f"inspect {fmt}: bias flag")

    # linear: all three semantics, both formats, against the f64 reference.
    x = rng.standard_normal((5, H)).astype(BF16)
    save_file({"x": x}, os.path.join(tmp, "x.safetensors"))
    layer = "model.layers.0.self_attn.o_proj"
    bias = tensors[layer + ".bias"].astype(np.float64)
    outs = {}
    for d, tag in ((ct, "ct"), (mo, "mo")):
        for sem in ("w4a16", "w4a4", "w4a4-vllm"):
            y_path = os.path.join(tmp, f"y_{tag}_{sem}.safetensors")
            args = ["linear", "--ckpt", d, "--layer", layer, "--input", os.path.join(tmp, "x.safetensors"),
                    "--output", y_path]
            if sem != "w4a4":
                args += ["--semantics", sem]
            run(*args)
            y = read_st(y_path)[0]["y"][1].astype(np.float64)
            outs[(tag, sem)] = y
            gs_w = t_ct[layer + ".weight_global_scale"][1][0]
            gs_x = t_ct[layer + ".input_global_scale"][1][0]
            if tag == "mo":  # the canonical form keeps ModelOpt's multiplier exactly; enc = f32(1/dec)
                gs_w = f32(1) / t_mo[layer + ".weight_scale_2"][1]
                gs_x = f32(1) / t_mo[layer + ".input_scale"][1]
            acc, mag = ref_linear(x.astype(f32), t_ct[layer + ".weight_packed"][1], t_ct[layer + ".weight_scale"][1],
                                  gs_w, gs_x, sem)
            ref = bf16(bf16(acc) + bias).astype(np.float64)
            err = np.abs(y - ref)
            b = bound(acc, mag, bias, H)
            check(np.linalg.norm(ref) > 0, "reference is non-trivial")
            check(bool(np.all(err <= b)), f"linear {tag} {sem}: max err {err.max():.3g}, worst err/bound "
                                          f"{(err / b).max():.3g}")
            print(f"linear {tag} {sem}: max |y - ref| = {err.max():.3g} (bound at that element "
                  f"{b.flat[int(np.argmax(err))]:.3g}); exact matches {np.mean(err == 0):.0%}")
    check(np.array_equal(outs[("ct", "w4a16")], outs[("mo", "w4a16")]), "w4a16 identical for CT and ModelOpt")
    check(not np.array_equal(outs[("ct", "w4a16")], outs[("ct", "w4a4")]), "w4a4 differs from w4a16")

    if FAILS:
        print(f"{len(FAILS)} failure(s)")
        return 1
    print("checkpoint round trip ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
