#!/usr/bin/env python3
"""`nvfp4 quantize` reproduces compressed-tensors' own output byte for byte.

tests/data/golden/ct_nvfp4.safetensors holds, per case <c>, the weight `<c>.input` (BF16/F16/F32 [N, K]) and
what compressed-tensors 0.20.0 wrote for it (`<c>.weight_packed`, `<c>.weight_scale`,
`<c>.weight_global_scale`; see tests/data/golden/README.md). This test builds a tiny model whose linear
weights are those inputs (the fused_q/k/v cases become the q/k/v projections of one attention block, so they
must share one global scale), runs `nvfp4 quantize --scheme nvfp4a16`, and compares the three tensors of every
case byte for byte. Only the Python standard library is needed.
argv: nvfp4 binary, tests/data dir. Exit 77 (skip) when the golden file is absent.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

BIN = os.path.abspath(sys.argv[1])
GOLDEN = os.path.join(sys.argv[2], "golden", "ct_nvfp4.safetensors")


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}


def write_st(path, tensors):
    h, data = {}, b""
    for name in sorted(tensors):
        dt, shape, raw = tensors[name]
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(h).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)


def module_of(case):
    return {"fused_q": "model.layers.0.self_attn.q_proj", "fused_k": "model.layers.0.self_attn.k_proj",
            "fused_v": "model.layers.0.self_attn.v_proj"}.get(case, "golden." + case)


def main():
    if not os.path.exists(GOLDEN):
        print(f"skip: {GOLDEN} not found")
        return 77
    g = read_st(GOLDEN)
    cases = sorted(k[:-len(".input")] for k in g if k.endswith(".input"))
    assert len(cases) >= 10, cases
    tmp = tempfile.mkdtemp()
    src, out = os.path.join(tmp, "src"), os.path.join(tmp, "out")
    os.makedirs(src)
    write_st(os.path.join(src, "model.safetensors"), {module_of(c) + ".weight": g[c + ".input"] for c in cases})
    json.dump({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"},
              open(os.path.join(src, "config.json"), "w"))
    p = subprocess.run([BIN, "quantize", src, out, "--scheme", "nvfp4a16"], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"FAIL: quantize exited {p.returncode}: {p.stderr}")
        return 1
    q = read_st(os.path.join(out, "model.safetensors"))
    fails = 0
    for c in cases:
        m = module_of(c)
        for part, dt in ((".weight_packed", "U8"), (".weight_scale", "F8_E4M3"), (".weight_global_scale", "F32")):
            want = g[c + part]
            got = q.get(m + part)
            if got is None or got[0] != want[0] or got[1] != want[1] or got[2] != want[2]:
                fails += 1
                detail = "missing" if got is None else f"{got[0]} {got[1]} vs {want[0]} {want[1]}"
                if got is not None and got[2] != want[2]:
                    diff = sum(1 for a, b in zip(got[2], want[2]) if a != b)
                    detail += f", {diff} of {len(want[2])} bytes differ"
                    if part == ".weight_global_scale":
                        detail += (f" (got {struct.unpack('<f', got[2])[0]}, "
                                   f"want {struct.unpack('<f', want[2])[0]})")
                print(f"FAIL: {c}{part}: {detail}")
        if not fails:
            print(f"ok:   {c}: codes, block scales and global scale identical to compressed-tensors")
    if fails:
        print(f"{fails} tensor(s) differ from compressed-tensors")
        return 1
    print(f"all {len(cases)} golden cases reproduced byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
