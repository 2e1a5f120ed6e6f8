#!/usr/bin/env python3
"""Compares `nvfp4 run --print-tokens` with Hugging Face `tokenizers` on random and hand-picked strings, for a
model's tokenizer.json and for the same vocabulary under each supported pre-tokenizer (GPT-2 ByteLevel,
SmolLM Digits+ByteLevel, Llama 3 Split, Qwen2 Split). A development check: needs `pip install tokenizers`
(not one of the project's pinned packages, so it is not part of ctest).

usage: tools/check_model_tokenizer.py NVFP4_BINARY MODEL_DIR [N_RANDOM]
       tools/check_model_tokenizer.py NVFP4_BINARY --spm [N_RANDOM]
The second form trains small SentencePiece-style BPE tokenizers (byte fallback; Prepend/Replace normalizer,
Metaspace first, Metaspace first + split) on data/*.txt with `tokenizers` and compares those.
Exit 0 when every string gives the same ids, 1 otherwise.
"""
import json
import random
import shutil
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer

LLAMA3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
          "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
FLAVOURS = {
    "gpt2": BYTELEVEL,
    "smollm": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTELEVEL]},
    "llama3": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
        dict(BYTELEVEL, use_regex=False)]},
    "qwen2": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3.replace("\\p{N}{1,3}", "\\p{N}")}, "behavior": "Isolated",
         "invert": False}, dict(BYTELEVEL, use_regex=False)]},
}


def compare(binary, tok_json, cases, label):
    d = tempfile.mkdtemp(prefix="nvfp4_tok_")
    try:
        with open(d + "/tokenizer.json", "w") as f:
            json.dump(tok_json, f)
        ref_tok = Tokenizer.from_file(d + "/tokenizer.json")
        bad = 0
        for c in cases:
            ref = ref_tok.encode(c).ids
            r = subprocess.run([binary, "run", "-m", d, "-p", c, "--print-tokens"], capture_output=True, text=True)
            got = json.loads(r.stdout) if r.returncode == 0 else r.stderr.strip()
            if got != ref:
                bad += 1
                if bad <= 5:
                    print(f"{label}: {c!r}: tokenizers {ref}, nvfp4 {got}")
        print(f"{label}: {len(cases) - bad}/{len(cases)} identical")
        return bad
    finally:
        shutil.rmtree(d, ignore_errors=True)


def spm_tokenizers():
    import os
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    text = "".join(open(os.path.join(root, f)).read() for f in sorted(os.listdir(root)) if f.endswith(".txt"))
    for variant in ["prepend-normalizer", "metaspace-first", "metaspace-first-split"]:
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        if variant == "prepend-normalizer":
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                         split=variant.endswith("split"))
        specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                                            show_progress=False))
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        j = json.loads(tok.to_str())
        # Llama 2 keeps the byte tokens as ordinary vocabulary entries, not added tokens.
        j["added_tokens"] = [a for a in j["added_tokens"] if not a["content"].startswith("<0x")]
        yield variant, j


def main():
    binary = sys.argv[1]
    spm = len(sys.argv) > 2 and sys.argv[2] == "--spm"
    model = None if spm else sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    rng = random.Random(1)
    alpha = "ab cd\n\r\t'1é日🙂.,!?-_ ZQ0\u00a0SsTtLlDd()\u3000½"
    cases = ["Hello world!", "I'M here. YOU'LL see 12345678 x", "  \n\n  x\r\n\r\ny ", "(a)(b) [c]",
             "def f(x):\n    return x**2  # comment\n", "café naïve 日本語 テスト € ½ ²"]
    cases += ["".join(rng.choice(alpha) for _ in range(rng.randint(1, 40))) for _ in range(n)]
    if spm:
        cases += ["<s>after bos", "x</s>y", " leading space", "two  spaces"]
        bad = sum(compare(binary, j, cases, f"sentencepiece BPE, {v}") for v, j in spm_tokenizers())
        sys.exit(1 if bad else 0)
    base = json.load(open(model + "/tokenizer.json"))
    bad = compare(binary, base, cases, "model's own tokenizer.json")
    if base.get("pre_tokenizer") is None or base["pre_tokenizer"].get("type") == "Metaspace":
        sys.exit(1 if bad else 0)  # a SentencePiece-style vocabulary: the byte-level variants do not apply
    for name, pre in FLAVOURS.items():
        j = dict(base, pre_tokenizer=pre)
        j["model"] = dict(base["model"], ignore_merges=False)
        bad += compare(binary, j, cases, f"pre-tokenizer {name}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
