#!/usr/bin/env python3
"""Perplexity ordering of the real SmolLM2-135M-Instruct: bf16 <= W4A16 <= W4A4, and the vLLM flavour.

Needs models/smollm2-135m-bf16 (scripts/demo.sh makes it); exits 77 (skip) without it. The pipeline of
test_model_pipeline.py (calibrate on data/calib.txt, quantize --scheme nvfp4, eval on the first 600 tokens of
data/eval.txt in 256-token windows, every variant on the CPU) is run on it.
Bounds:
  - ordering, paired: for per-token NLL differences d_t between two variants over the same n tokens,
    "A <= B" passes unless mean(d) < -3·sd(d)/sqrt(n). Quantization noise can make a model luckier on some
    tokens; three standard errors of the paired mean is the noise floor, so only a genuinely inverted order
    (the quantized model significantly better than its source) fails.
  - sanity: exp(mean NLL) of every quantized variant stays below 2x bf16. NVFP4 on a 135M model costs tens
    of percent (measured: +24% W4A16, +40% W4A4); a broken path (dropped bias, wrong global scale, permuted
    rows) costs orders of magnitude (a uniform guess is 49152).
argv: nvfp4 binary, tests/data directory.
"""
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_model_pipeline as tp  # noqa: E402  (exits 77 itself when gguf is missing)

ROOT = tp.ROOT


def paired_not_below(a, b, name_a, name_b):
    """Passes unless B is better than A by more than 3 standard errors of the paired mean difference."""
    d = [y - x for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    assert mean >= -3 * se, f"{name_b} beats {name_a}: mean NLL difference {mean:.4f} < -3·SE ({-3 * se:.4f})"
    return mean, se


def main():
    bf = os.path.join(ROOT, "models", "smollm2-135m-bf16")
    if not os.path.exists(os.path.join(bf, "model.safetensors")):
        print(f"skip: no {bf} (run scripts/demo.sh)")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="nvfp4_pipe_real_")
    try:
        res = tp.pipeline(bf, tmp, "600")
        base = tp.ppl(res["bf16"])
        for a, b in [("bf16", "w4a16"), ("w4a16", "w4a4"), ("bf16", "w4a4-vllm")]:
            m, se = paired_not_below(res[a], res[b], a, b)
            print(f"  {a} -> {b}: mean NLL +{m:.4f} (SE {se:.4f})")
        for k in ["w4a16", "w4a4", "w4a4-vllm"]:
            assert tp.ppl(res[k]) < 2 * base, f"{k}: perplexity {tp.ppl(res[k]):.2f} >= 2x bf16 ({base:.2f})"
        print("SmolLM2 ordering: " + ", ".join(f"{k} {tp.ppl(v):.3f}" for k, v in res.items()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
