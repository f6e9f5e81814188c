#!/usr/bin/env python3
"""Check our tokenizer files against Hugging Face's tokenizer and our Python encoder.

1. A few hundred varied texts (Austen, code, numbers, whitespace runs, contractions,
   accents and decomposed accents, CJK, Hangul jamo, RTL scripts, emoji with modifiers and
   ZWJ, flags, control characters, noncharacters, private use, special tokens whole,
   adjacent and broken) are encoded by HF (node training/hf_encode.js) and by bpe.py; the ids
   must be equal, and both decodes must give the NFC text back.
2. Random byte strings (not necessarily UTF-8) go through the byte-level BPE and must come
   back byte for byte; every one of the 256 bytes is a token of its own.
3. With --nanovllm BIN, `BIN tokenize --model DIR --text T` must print the same ids.
"""
import argparse
import json
import os
import random
import subprocess
import unicodedata

import bpe

FIXED = [
    "", " ", "  ", "\n", "\n\n\n", "\t", "\r\n", " \n ", "a  b   c", "trailing   ", "   leading",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "\"My dear Mr. Bennet,\" said his lady to him one day, \"have you heard that Netherfield Park is let at last?\"",
    "I'LL don't you'Re WE'VE she'd it's 'tis o'clock", "12345 3.14159 1,000,000 0x1F 2024-01-01",
    "café naïve résumé Ångström", "cafe\u0301 A\u030a \u212b \u2126 \ufb01", "你好，世界！今天天气很好。",
    "日本語のテキストです。カタカナ", "\u1100\u1161\u11a8 한국어", "مرحبا بالعالم", "שלום עולם", "Привет, мир!",
    "👍🏽 👨\u200d👩\u200d👧 🇬🇧🇫🇷 ❤️ 🤖", "\x00\x01\x1f\x7f", "\u200b\u200c\u200d\ufeff", "\ufffd\uffff\ufffe",
    "\ue000\U000f0000\U0010fffd", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛", "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { a[i] = b[i]; }", "https://example.com/a?b=c&d=e#f", "$$\\sum_{i=1}^n i^2$$",
    "<|endoftext|>", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|im_end|><|im_start|>",
    "<|im_end", "<|im_end|", "|im_end|>", "<<|im_end|>>", "<think>\n\n</think>\n\n", "<think>x</think>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "<tool_response>ok</tool_response>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>",
    "\u00a0\u2003\u3000 nbsp", "a\u0300\u0301\u0302\u0303", "ﬀ ﬃ Ⅻ ①", "\r\r\n\n\r", "... --- !!! ???",
]
ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r", ".,;:!?'\"-—()[]{}<>|/\\_*&^%$#@~`+=",
    "éèêëàâäôöüçñßøåæœ", "\u0300\u0301\u0308\u030a", "你好世界天气中文字", "ひらがなカタカナ", "한국어", "\u1100\u1161\u11a8",
    "مرحبا", "שלום", "Привет", "😀👍🏽🇬🇧❤️\u200d\ufe0f", "\x00\x01\x1b\x7f\x85", "\u200b\ufeff\ufffd\uffff\ue000",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]


def random_texts(rng, austen, n):
    words = austen.split(" ")
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            kind = rng.random()
            if kind < 0.4:
                start = rng.randrange(len(words) - 10)
                parts.append(" ".join(words[start:start + rng.randint(1, 10)]))
            elif kind < 0.8:
                alphabet = rng.choice(ALPHABETS)
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))))
            elif kind < 0.9:
                parts.append(rng.choice(SPECIALS))
            else:  # any code point except surrogates
                cp = rng.choice([rng.randrange(0x20, 0x3000), rng.randrange(0xe000, 0x110000)])
                parts.append(chr(cp))
        out.append(rng.choice(["", " ", "\n"]).join(parts))
    return out


def hf_encode(tokenizer_json, texts):
    proc = subprocess.run(["node", os.path.join(os.path.dirname(__file__), "hf_encode.js"), tokenizer_json],
                          input=json.dumps(texts).encode(), capture_output=True, check=True)
    return json.loads(proc.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--corpus", default="build/training/corpus")
    ap.add_argument("--random", type=int, default=400)
    ap.add_argument("--nanovllm", default=None, help="path of the nanovllm binary (optional)")
    args = ap.parse_args()
    rng = random.Random(27)
    with open(os.path.join(args.corpus, "heldout_austen.txt"), encoding="utf-8") as f:
        austen = f.read()
    texts = FIXED + random_texts(rng, austen, args.random)
    tokenizer_json = os.path.join(args.model, "tokenizer.json")
    tok = bpe.Tokenizer.from_file(tokenizer_json)

    hf = hf_encode(tokenizer_json, texts)
    failures = 0
    for text, hf_ids, hf_text in zip(texts, hf["ids"], hf["decoded"]):
        ours = tok.encode(text)
        nfc = unicodedata.normalize("NFC", text)
        if ours != hf_ids or tok.decode(ours) != nfc or hf_text != nfc:
            failures += 1
            print(f"MISMATCH {text!r}\n  ours {ours}\n  hf   {hf_ids}\n  decoded {tok.decode(ours)!r} / {hf_text!r}")
    print(f"HF vs bpe.py: {len(texts) - failures}/{len(texts)} texts identical "
          f"({sum(len(i) for i in hf['ids']):,} tokens)")

    byte_failures = sum(1 for b in range(256) if tok.vocab.get(bpe.BYTE_TO_CHAR[b]) != b)
    for _ in range(500):
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        symbols = bpe.apply_merges([bpe.BYTE_TO_CHAR[b] for b in raw], tok.ranks)
        if tok.decode_bytes([tok.vocab[s] for s in symbols]) != raw:
            byte_failures += 1
            print(f"BYTE ROUND TRIP FAILED {raw!r}")
    print(f"byte round trip: {byte_failures} failures (256 single bytes + 500 random byte strings)")

    cli_failures, cli_checked = 0, 0
    if args.nanovllm:
        for text, hf_ids in zip(texts, hf["ids"]):
            if "\x00" in text:
                continue  # cannot travel in argv
            proc = subprocess.run([args.nanovllm, "tokenize", "--model", args.model, "--text", text],
                                  capture_output=True, text=True)
            cli_checked += 1
            try:
                got = json.loads(proc.stdout)
            except json.JSONDecodeError:
                got = proc.stdout + proc.stderr
            if got != hf_ids:
                cli_failures += 1
                print(f"NANOVLLM MISMATCH {text!r}\n  nanovllm {got}\n  hf       {hf_ids}")
        print(f"nanovllm tokenize vs HF: {cli_checked - cli_failures}/{cli_checked} identical")
    raise SystemExit(1 if failures or byte_failures or cli_failures else 0)


if __name__ == "__main__":
    main()
