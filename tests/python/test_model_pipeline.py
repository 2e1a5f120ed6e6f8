#!/usr/bin/env python3
"""End to end on a tiny model: import-gguf -> calibrate -> quantize --scheme nvfp4 -> eval in every semantics -> run.

A tiny random Llama GGUF (written with the gguf package, see test_model_gguf.py) goes through the whole
pipeline. Checked: every step exits 0; perplexities are finite and in [1, 2·V] (V = vocabulary). The tiny
lm_head has N(0, 0.02²) weights over H = 256 inputs of RMS ~1 (after the final norm), so the logits are
near-Gaussian with σ ≈ 0.02·sqrt(256) = 0.32 and perplexity ≈ V·exp(σ²/2) ≈ 1.05·V (E[logsumexp] of V
Gaussian logits is log V + σ²/2); 2·V allows σ up to 1.18. A scale or layout bug gives NaN/inf or far more.
The semantics flag must take effect (w4a16, w4a4 and w4a4-vllm give different per-token NLLs, while the
default on a CPU equals w4a16, the SPEC §6 fallback), and the unquantized run differs from every quantized one.
The real-model ordering is test_model_ppl_order.py.
argv: nvfp4 binary, tests/data directory.
"""
import math
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import gguf  # noqa: F401
except ImportError:
    print("skip: the gguf package is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_model_gguf as tg  # noqa: E402

BIN = sys.argv[1]
DATA = sys.argv[2]
ROOT = os.path.abspath(os.path.join(DATA, "..", ".."))
TEXT_EVAL = os.path.join(ROOT, "data", "eval.txt")
TEXT_CALIB = os.path.join(ROOT, "data", "calib.txt")
tg.BIN = BIN


def run(*args):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise AssertionError(f"nvfp4 {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-600:]}")
    return r


def nll(model, tmp, tag, *extra, max_tokens="300"):
    path = os.path.join(tmp, tag + ".nll")
    run("eval", "-m", model, "-f", TEXT_EVAL, "--max-tokens", max_tokens, "--ctx", "256", "--nll-out", path,
        "--device", "cpu", *extra)
    with open(path) as f:
        v = [float(x) for x in f]
    assert v and all(math.isfinite(x) for x in v), f"{tag}: non-finite NLL"
    return v


def ppl(v):
    return math.exp(sum(v) / len(v))


def pipeline(src_gguf, tmp, max_tokens):
    bf = os.path.join(tmp, "bf16")
    q = os.path.join(tmp, "nvfp4")
    amax = os.path.join(tmp, "amax.json")
    if src_gguf.endswith(".gguf"):
        run("import-gguf", src_gguf, bf)
    else:
        bf = src_gguf
    run("calibrate", "-m", bf, "-f", TEXT_CALIB, "-o", amax, "--ctx", "256")
    run("quantize", bf, q, "--scheme", "nvfp4", "--calib-amax", amax)
    res = {"bf16": nll(bf, tmp, "bf16", max_tokens=max_tokens)}
    for s in ["w4a16", "w4a4", "w4a4-vllm"]:
        res[s] = nll(q, tmp, s, "--semantics", s, max_tokens=max_tokens)
    res["default"] = nll(q, tmp, "default", max_tokens=max_tokens)
    out = run("run", "-m", q, "-p", "The river", "-n", "8", "--device", "cpu", "--emulation")
    assert "w4a4 on cpu" in out.stderr, out.stderr[-400:]
    return res


def test_tiny():
    tmp = tempfile.mkdtemp(prefix="nvfp4_pipe_")
    try:
        src = os.path.join(tmp, "tiny.gguf")
        _, toks, _ = tg.write_tiny(src)
        res = pipeline(src, tmp, "300")
        V = len(toks)
        for k, v in res.items():
            p = ppl(v)
            assert 1.0 <= p <= 2 * V, f"tiny {k}: perplexity {p} outside [1, {2 * V}]"
        assert res["default"] == res["w4a16"], "default semantics on the CPU must be the W4A16 fallback"
        names = ["bf16", "w4a16", "w4a4", "w4a4-vllm"]
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                assert res[names[i]] != res[names[j]], f"{names[i]} and {names[j]} gave identical NLLs"
        print("tiny pipeline: " + ", ".join(f"{k} {ppl(v):.3f}" for k, v in res.items()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    test_tiny()
