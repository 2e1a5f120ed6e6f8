#!/usr/bin/env python3
"""Make the golden files that pin nvfp4's numerics to the ecosystem's own implementations.

Needs torch and compressed-tensors (run it where they are installed). Writes, into OUT_DIR:
  ct_nvfp4.safetensors   compressed-tensors' NVFP4 weight compressor (CPU torch path) on bf16/fp16/fp32 matrices:
                         per case `<case>.input`, `<case>.weight_packed`, `<case>.weight_scale`,
                         `<case>.weight_global_scale`; fused sets share one global scale like llm-compressor's.
  act_quant.safetensors  vLLM's reference activation quantizer (ref_nvfp4_quant, restated from its published
                         formulas): per case `<case>.x`, `<case>.input_global_scale`, `<case>.codes` (packed),
                         `<case>.scales` (e4m3, linear).
  golden.json            case list, library versions, and whether compressed-tensors' GPU (Triton) path agreed.

Usage: python3 tools/golden/make_golden.py OUT_DIR
"""
import json
import sys

import torch
import compressed_tensors
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
from compressed_tensors.quantization import preset_name_to_scheme
from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam
from safetensors.torch import save_file

GROUP = 16


def ct_quantize(w, scheme, global_scale=None, device="cpu"):
    """Quantize one weight the way llm-compressor does: observer min/max -> gparam -> qparams -> compressor."""
    w = w.to(device)
    if global_scale is None:
        global_scale = generate_gparam(w.min().reshape(1), w.max().reshape(1))
    global_scale = global_scale.to(device)
    n, k = w.shape
    g = w.reshape(n, k // GROUP, GROUP)
    scale, _ = calculate_qparams(g.amin(dim=-1), g.amax(dim=-1), scheme.weights, global_scale=global_scale)
    out = NVFP4PackedCompressor.compress(
        {"weight": w, "weight_scale": scale, "weight_global_scale": global_scale}, scheme)
    return {k2: v.detach().cpu().contiguous() for k2, v in out.items()}


def weight_cases():
    gen = torch.Generator().manual_seed(1234)

    def randn(n, k, std=1.0):
        return torch.randn(n, k, generator=gen) * std

    cases = {}
    cases["bf16_random"] = randn(64, 128, 0.02).to(torch.bfloat16)
    cases["fp16_random"] = randn(48, 96, 0.05).to(torch.float16)
    cases["fp32_random"] = randn(32, 64, 0.1).to(torch.float32)
    # fp16 with amax < 2688/65504: 2688/amax overflows fp16, so gs falls back to 1.0
    cases["fp16_tiny_amax"] = (randn(16, 64, 0.004)).clamp(-0.03, 0.03).to(torch.float16)
    # E2M1 ties: values on a 1/8 grid in [-6, 6]; every group holds a +-6 or +-3, so t is 1 or 1/2 and x/t lands
    # on the interval ends 0.25, 0.75, ..., 5 exactly; includes -0.0, tiny negatives and zero blocks.
    t = torch.randint(-48, 49, (32, 64), generator=gen).float() / 8.0
    for r in range(32):
        for gi in range(4):
            t[r, gi * 16] = 6.0 if (r + gi) % 2 == 0 else -3.0
    t[0, 1:16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5,
                               -5.0, -0.0])
    t[1, 17:32] = torch.tensor([0.125, 0.375, 0.625, 0.875, 1.25, 1.75, -0.125, -0.375, -0.625, -0.875,
                                -0.0625, 0.0625, -0.0, 0.0, 1.5])
    t[2, 32:48] = 0.0  # a zero block inside a non-zero tensor: scale 0 -> 0.125
    cases["bf16_ties"] = t.to(torch.bfloat16)
    cases["fp16_ties"] = t.to(torch.float16)
    # Wide dynamic range: some block scales land in e4m3's subnormal range
    wide = randn(16, 64, 1.0)
    wide[0, :16] *= 1000.0
    wide[1:8, :] *= 0.002
    cases["bf16_subnormal_scales"] = wide.to(torch.bfloat16)
    cases["bf16_all_zero"] = torch.zeros(16, 32, dtype=torch.bfloat16)
    # Fused set (q/k/v): one global scale from the largest amax of the set
    cases["fused_q"] = randn(32, 64, 0.02).to(torch.bfloat16)
    cases["fused_k"] = randn(16, 64, 0.05).to(torch.bfloat16)
    cases["fused_v"] = randn(16, 64, 0.01).to(torch.bfloat16)
    return cases


def vllm_ref_nvfp4_quant(x, global_scale):
    """vLLM's reference activation quantizer (tests/kernels/quantization/nvfp4_utils.py), restated."""
    def reciprocal(v):
        return torch.where(v == 0, torch.zeros_like(v), 1.0 / v)
    m, n = x.shape
    xb = x.reshape(m, n // GROUP, GROUP)
    vec_max = xb.abs().amax(dim=-1, keepdim=True).to(torch.float32)
    scale = global_scale * (vec_max * reciprocal(torch.tensor(6.0)))
    scale = torch.clamp(scale, min=-448.0, max=448.0).to(torch.float8_e4m3fn)
    out_scale = reciprocal(scale.to(torch.float32) * reciprocal(global_scale))
    y = torch.clamp(xb.to(torch.float32) * out_scale, -6.0, 6.0).reshape(m, n)
    return fp4_codes(y), scale.squeeze(-1)


def fp4_codes(y):
    """E2M1 codes of values already clamped to [-6, 6], by the interval table (ties to even), sign kept."""
    a = y.abs()
    bounds = [(0.25, True), (0.75, False), (1.25, True), (1.75, False), (2.5, True), (3.5, False), (5.0, True)]
    idx = torch.zeros_like(a, dtype=torch.uint8)
    for i, (b, closed) in enumerate(bounds):
        idx += (a > b).to(torch.uint8) if closed else (a >= b).to(torch.uint8)
    codes = idx | (torch.signbit(y).to(torch.uint8) << 3)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()


def main():
    out_dir = sys.argv[1]
    scheme = preset_name_to_scheme("NVFP4", ["Linear"])
    tensors, info = {}, {"compressed_tensors": compressed_tensors.__version__, "torch": torch.__version__,
                         "weight_cases": {}, "act_cases": {}}
    cases = weight_cases()
    fused = ["fused_q", "fused_k", "fused_v"]
    fused_gs = torch.min(torch.stack([generate_gparam(cases[c].min().reshape(1), cases[c].max().reshape(1))
                                      for c in fused]))
    for name, w in cases.items():
        gs = fused_gs.reshape(1) if name in fused else None
        out = ct_quantize(w, scheme, gs, "cpu")
        gpu_same = None
        if torch.cuda.is_available():
            og = ct_quantize(w, scheme, gs, "cuda")
            gpu_same = all(torch.equal(out[k].view(torch.uint8) if out[k].dtype == torch.float8_e4m3fn else out[k],
                                       og[k].view(torch.uint8) if og[k].dtype == torch.float8_e4m3fn else og[k])
                           for k in ("weight_packed", "weight_scale", "weight_global_scale"))
        tensors[f"{name}.input"] = w.contiguous()
        for k in ("weight_packed", "weight_scale", "weight_global_scale"):
            tensors[f"{name}.{k}"] = out[k].clone()
        info["weight_cases"][name] = {"dtype": str(w.dtype), "shape": list(w.shape), "fused": name in fused,
                                      "global_scale": float(out["weight_global_scale"][0]),
                                      "gpu_triton_path_identical": gpu_same}
    save_file(tensors, f"{out_dir}/ct_nvfp4.safetensors", metadata={"format": "pt"})

    gen = torch.Generator().manual_seed(99)
    act = {}
    act["bf16_random"] = ((torch.randn(8, 256, generator=gen) * 3.0).to(torch.bfloat16), None)
    act["fp16_random"] = ((torch.randn(5, 128, generator=gen) * 0.5).to(torch.float16), None)
    x = (torch.randn(4, 64, generator=gen) * 2.0)
    x[0, :16] = 0.0          # zero block: scale 0, codes 0
    x[1, :16] *= 1e-4        # tiny block: subnormal scale
    x[2, 16:32] = -x[2, 16:32].abs()
    act["bf16_edge"] = (x.to(torch.bfloat16), None)
    act["bf16_gs1"] = ((torch.randn(3, 64, generator=gen) * 0.01).to(torch.bfloat16), 1.0)
    aout = {}
    for name, (xv, gs_fixed) in act.items():
        amax = xv.abs().max().to(torch.float32)
        gs = torch.tensor([gs_fixed], dtype=torch.float32) if gs_fixed is not None else \
            (2688.0 / amax).to(xv.dtype).to(torch.float32).reshape(1)
        codes, scales = vllm_ref_nvfp4_quant(xv, gs)
        aout[f"{name}.x"] = xv.contiguous()
        aout[f"{name}.input_global_scale"] = gs
        aout[f"{name}.codes"] = codes
        aout[f"{name}.scales"] = scales.contiguous()
        info["act_cases"][name] = {"dtype": str(xv.dtype), "shape": list(xv.shape), "gs": float(gs[0])}
    save_file(aout, f"{out_dir}/act_quant.safetensors", metadata={"format": "pt"})
    with open(f"{out_dir}/golden.json", "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
    print(json.dumps(info, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
