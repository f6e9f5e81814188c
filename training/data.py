"""Token streams for training and evaluation.

The training stream is the six novels (corpus.py's train/*.txt, in corpus.NOVELS order),
each followed by <|endoftext|>, tokenized with our BPE and cached as an int32 tensor.
Batches are random windows of seq_len + 1 tokens; the offsets of step s come from a torch
generator seeded with (seed, s), so a resumed run draws exactly the batches it would have.
"""
import os

import torch

import bpe
import corpus


def tokenize_file(tok, path):
    with open(path, encoding="utf-8") as f:
        return tok.encode(f.read())


def training_tokens(tok, corpus_dir, cache_path):
    """-> int64 tensor [N] of the whole training stream (cached at cache_path)."""
    if os.path.exists(cache_path):
        return torch.load(cache_path).long()
    eos = tok.added["<|endoftext|>"]
    ids = []
    for name in corpus.NOVELS:
        ids += tokenize_file(tok, os.path.join(corpus_dir, "train", name + ".txt")) + [eos]
    stream = torch.tensor(ids, dtype=torch.int32)
    os.makedirs(os.path.dirname(cache_path), exist_ok=True)
    torch.save(stream, cache_path)
    return stream.long()


def batch(stream, step, seed, batch_size, seq_len, max_positions):
    """-> (inputs, targets, positions), each [batch_size, seq_len] int64, for optimizer step
    `step`. Half the windows (at random) start at position 0, the others at a random
    position below max_positions - seq_len. RoPE's attention scores depend only on the
    distance between positions (in exact arithmetic), so this changes nothing but the
    rounding: it exercises the large angles an engine meets past seq_len."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(stream) - seq_len - 1, (batch_size,), generator=g)
    windows = torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()])  # [B, T + 1]
    shift = torch.randint(0, max_positions - seq_len + 1, (batch_size, 1), generator=g)
    shift = shift * (torch.rand(batch_size, 1, generator=g) < 0.5)
    positions = shift + torch.arange(seq_len)                                    # [B, T]
    return windows[:, :-1], windows[:, 1:], positions


def chunks(ids, seq_len):
    """Held-out evaluation: -> list of non-overlapping [seq_len + 1] windows sharing one
    token at each boundary, so every token after the first is predicted exactly once."""
    out = []
    for s in range(0, len(ids) - 1, seq_len):
        window = ids[s:s + seq_len + 1]
        if len(window) >= 2:
            out.append(torch.tensor(window, dtype=torch.long))
    return out


def load_tokenizer(model_dir):
    return bpe.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
