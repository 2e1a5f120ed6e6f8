#!/usr/bin/env bash
# Bad checkpoints through the command line: each case must fail with exit 1 (2 for usage errors), print one
# line "error: ..." on stderr naming the file and (where there is one) the tensor, and leave no output behind.
# Files are made with the Python standard library only (struct/json), so this test needs no venv.
#   $1: nvfp4 binary   $2: tests/data (unused)
set -uo pipefail
bin=$(realpath "$1")
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

python3 - <<'PY'
import json, os, struct

def st(path, tensors, header_len=None, data_extra=b"", raw_header=None):
    """tensors: list of (name, dtype, shape, bytes); offsets laid out in order."""
    h, data, off = {}, b"", 0
    for name, dt, shape, b in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        data += b
        off += len(b)
    text = raw_header if raw_header is not None else json.dumps(h)
    text = text.encode()
    n = len(text) if header_len is None else header_len
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n) + text + data + data_extra)

def model(d, tensors, cfg=True, scheme="nvfp4a16", **kw):
    os.makedirs(d, exist_ok=True)
    st(os.path.join(d, "model.safetensors"), tensors, **kw)
    if cfg:
        ia = None if scheme == "nvfp4a16" else {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                "group_size": 16, "symmetric": True, "dynamic": "local"}
        json.dump({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "quantization_config": {
            "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                "symmetric": True, "dynamic": False}, "input_activations": ia}},
            "ignore": ["lm_head"], "quantization_status": "compressed"}}, open(os.path.join(d, "config.json"), "w"))

f32 = lambda v: struct.pack("<f", v)
N, K = 4, 32
def layer(name="layer", K=K, scale_shape=None, scale_byte=0x38, gs=448.0, with_scale=True, w4a4=False, bias=False):
    t = [(name + ".weight_packed", "U8", [N, K // 2], bytes([0x21]) * (N * K // 2))]
    ss = scale_shape or [N, K // 16]
    if with_scale:
        t.append((name + ".weight_scale", "F8_E4M3", ss, bytes([scale_byte]) * (ss[0] * ss[1])))
    t.append((name + ".weight_global_scale", "F32", [1], f32(gs)))
    if w4a4:
        t.append((name + ".input_global_scale", "F32", [1], f32(448.0)))
    if bias:
        t.append((name + ".bias", "BF16", [N], struct.pack("<4H", 0x3F80, 0x4000, 0xBF80, 0)))
    return t

# header-level damage
open("truncated.safetensors", "wb").write(b"\x10\x00\x00")
st("pasteof.safetensors", [("a", "U8", [1], b"x")], header_len=10**6)
st("badjson.safetensors", [], raw_header='{"a": {"dtype": "U8", ')
st("dtype.safetensors", [("w.weight", "F4_E2M1", [4], b"ab")])
st("mismatch.safetensors", [("w.weight", "BF16", [2, 3], b"0123456789")])
st("overlap.safetensors", [], raw_header=json.dumps({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                                     "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}),
   data_extra=b"012345")
st("range.safetensors", [], raw_header=json.dumps({"a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}),
   data_extra=b"0123")
# layer-level damage (valid files)
model("noscale", layer(with_scale=False))
model("k24", layer(K=24, scale_shape=[N, 1]))
model("scaleshape", layer(scale_shape=[N, 4]))
model("nan", layer(scale_byte=0x7F))
model("oldnan", layer(scale_byte=0x7F, gs=float("inf"), bias=True))
model("noconfig", layer(), cfg=False)
model("good", layer(bias=True))
model("good4", layer(w4a4=True), scheme="nvfp4")
st("x.safetensors", [("x", "BF16", [2, K], struct.pack("<64H", *([0x3F80] * 64)))])
st("x_badk.safetensors", [("x", "BF16", [2, 16], struct.pack("<32H", *([0x3F80] * 32)))])
# an unquantized model with K = 24 for quantize
os.makedirs("plain", exist_ok=True)
st("plain/model.safetensors", [("odd.weight", "BF16", [8, 24], bytes(8 * 24 * 2)),
                               ("fine.weight", "BF16", [8, 32], struct.pack("<256H", *([0x3F80] * 256)))])
json.dump({"torch_dtype": "bfloat16"}, open("plain/config.json", "w"))
PY

fails=0
# expect CODE PATTERN... -- CMD...: runs CMD, checks exit code, one-line stderr starting "error:", patterns.
expect() {
  local code=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$@" >out.txt 2>err.txt
  local rc=$?
  local lines; lines=$(grep -c . err.txt)
  local ok=1
  [ "$rc" -eq "$code" ] || ok=0
  if [ "$code" -ne 0 ]; then
    [ "$lines" -eq 1 ] && grep -q '^error: ' err.txt || ok=0
  fi
  for p in "${pats[@]}"; do grep -qF -- "$p" err.txt out.txt || ok=0; done
  if [ $ok -eq 1 ]; then
    echo "ok:   $* -> $rc"
  else
    echo "FAIL: $* -> exit $rc (want $code), patterns: ${pats[*]}"; sed 's/^/      stderr: /' err.txt | head -5
    fails=$((fails + 1))
  fi
}
none_left() {  # no file or temp folder matching the given output name
  local n=$1
  if ls -a | grep -q -- "$n"; then echo "FAIL: output '$n' left behind: $(ls -a | grep -- "$n")"; fails=$((fails + 1)); fi
}

expect 1 truncated.safetensors truncated -- "$bin" inspect truncated.safetensors
expect 1 pasteof.safetensors "header length 1000000" -- "$bin" inspect pasteof.safetensors
expect 1 badjson.safetensors "not valid JSON" -- "$bin" inspect badjson.safetensors
expect 1 dtype.safetensors "'w.weight'" F4_E2M1 -- "$bin" inspect dtype.safetensors
expect 1 mismatch.safetensors "'w.weight'" "needs 12 bytes" -- "$bin" inspect mismatch.safetensors
expect 1 overlap.safetensors "'b'" overlaps -- "$bin" inspect overlap.safetensors
expect 1 range.safetensors "'a'" "outside the data buffer" -- "$bin" inspect range.safetensors
expect 1 noconfig config.json -- "$bin" inspect noconfig
expect 0 "inferred" -- "$bin" inspect noconfig/model.safetensors   # a lone file needs no config.json
# layer problems: inspect reports them (exit 0), linear refuses the layer (exit 1), no output written
expect 0 "missing tensor 'layer.weight_scale'" -- "$bin" inspect noscale
expect 1 "layer.weight_scale" noscale/model.safetensors -- "$bin" linear --ckpt noscale --layer layer --input x.safetensors --output y1.safetensors
none_left y1.safetensors
expect 1 "layer.weight_packed" "K = 24" "multiple of 16" -- "$bin" linear --ckpt k24 --layer layer --input x.safetensors --output y2.safetensors
none_left y2.safetensors
expect 1 "layer.weight_scale" "[4, 4]" "expected [4, 2]" -- "$bin" linear --ckpt scaleshape --layer layer --input x.safetensors --output y3.safetensors
none_left y3.safetensors
expect 0 "NaN block scales" -- "$bin" inspect nan
expect 1 "layer.weight_scale" "NaN block scales" -- "$bin" linear --ckpt nan --layer layer --input x.safetensors --output y4.safetensors
none_left y4.safetensors
expect 1 x_badk.safetensors "K = 16" -- "$bin" linear --ckpt good --layer layer --input x_badk.safetensors --output y5.safetensors
none_left y5.safetensors
expect 1 "no linear module 'nope'" -- "$bin" linear --ckpt good --layer nope --input x.safetensors --output y6.safetensors
expect 1 "W4A16" -- "$bin" linear --ckpt good --layer layer --input x.safetensors --output y7.safetensors --semantics w4a4
none_left y7.safetensors
expect 2 "semantics" -- "$bin" linear --ckpt good --layer layer --input x.safetensors --output y8.safetensors --semantics w8a8
# older writer: NaN block scales with an infinite global scale load as zeros (warning), y = bias
"$bin" linear --ckpt oldnan --layer layer --input x.safetensors --output yold.safetensors >out.txt 2>err.txt
rc=$?
if [ $rc -ne 0 ] || ! grep -q "warning" err.txt; then echo "FAIL: older-writer NaN file: exit $rc"; cat err.txt; fails=$((fails+1)); else
  python3 - <<'PY' || { echo "FAIL: older-writer output is not the bias"; fails=$((fails+1)); }
import json, struct
b = open("yold.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert h["y"]["dtype"] == "BF16" and h["y"]["shape"] == [2, 4], h
vals = struct.unpack("<8H", b[8 + n:8 + n + 16])
assert vals == (0x3F80, 0x4000, 0xBF80, 0) * 2, vals
print("ok:   older-writer NaN/inf layer computes zeros + bias")
PY
fi
# quantize: failures leave nothing behind; existing output needs --force; the input is untouched
expect 1 "odd.weight" "K = 24" -- "$bin" quantize plain qout --scheme nvfp4a16
none_left qout
expect 2 "--calib-amax" -- "$bin" quantize plain qout2 --scheme nvfp4
none_left qout2
expect 2 "already" -- "$bin" quantize good qout3 --scheme nvfp4a16
none_left qout3
expect 1 truncated.safetensors -- "$bin" quantize truncated.safetensors qout4 --scheme nvfp4a16
none_left qout4
sum_before=$(md5sum plain/model.safetensors)
expect 0 -- "$bin" quantize plain qok --scheme nvfp4a16 --ignore odd --ignore lm_head 2>/dev/null
mkdir -p exists
expect 2 "exists" -- "$bin" quantize plain exists --scheme nvfp4a16 --ignore odd
[ -z "$(ls exists)" ] || { echo "FAIL: existing output modified"; fails=$((fails+1)); }
[ "$(md5sum plain/model.safetensors)" = "$sum_before" ] || { echo "FAIL: input modified"; fails=$((fails+1)); }

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all checkpoint error cases behave"
