#!/usr/bin/env python3
"""Train the default model (a small Qwen3) on the Austen training stream, fp32 on the CPU.

AdamW (betas 0.9/0.95, weight decay 0.1 on matrices only), linear warmup then cosine decay
to 10% of the peak LR, gradient clipping at 1.0, batches of batch_size x seq_len tokens.
Everything random comes from --seed: the initial weights (torch.manual_seed) and each step's
batch (data.batch). A checkpoint (model, optimizer, step, log) is written every
--checkpoint-every steps to <run>/checkpoint.pt; rerunning the same command resumes from it.
The finished model goes to <run>/final.pt; export.py turns it into the HF folder.
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning
                                                     # threads when another process is busy
import argparse
import dataclasses
import json
import math
import platform
import time

import torch
import torch.nn.functional as F

import data
from model import Config, Qwen3


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def heldout_loss(model, ids, seq_len, max_windows=None):
    """Mean next-token loss (nats) over non-overlapping windows of a held-out id list."""
    model.eval()
    total, count = 0.0, 0
    for w in data.chunks(ids, seq_len)[:max_windows]:
        logits = model(w[None, :-1])[0]
        total += F.cross_entropy(logits, w[1:], reduction="sum").item()
        count += len(w) - 1
    model.train()
    return total / count


def make_optimizer(model, args):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="build/training/corpus")
    ap.add_argument("--tokenizer", default="models/default", help="folder with our tokenizer.json")
    ap.add_argument("--run", default="build/training/run", help="checkpoints and log")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--checkpoint-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.run, exist_ok=True)

    tok = data.load_tokenizer(args.tokenizer)
    cfg = Config(vocab_size=len(tok.vocab) + len(tok.added))
    stream = data.training_tokens(tok, args.corpus, os.path.join(args.run, "train_tokens.pt"))
    heldout = data.tokenize_file(tok, os.path.join(args.corpus, "heldout_austen.txt"))
    print(f"config {cfg}\ntraining stream {len(stream):,} tokens; held-out Austen {len(heldout):,} tokens", flush=True)

    torch.manual_seed(args.seed)
    model = Qwen3(cfg)
    model.init_weights()
    opt = make_optimizer(model, args)
    state = {"step": 0, "log": [], "elapsed_s": 0.0}
    ckpt_path = os.path.join(args.run, "checkpoint.pt")
    if os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path)
        if ckpt["args"] != vars(args):
            raise SystemExit(f"{ckpt_path} was written with other arguments: {ckpt['args']}")
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        state = ckpt["state"]
        print(f"resumed at step {state['step']}", flush=True)

    def save(path):
        tmp = path + ".tmp"
        torch.save({"args": vars(args), "config": dataclasses.asdict(cfg), "model": model.state_dict(),
                    "optimizer": opt.state_dict(), "state": state}, tmp)
        os.replace(tmp, path)

    t0 = time.time() - state["elapsed_s"]
    while state["step"] < args.steps:
        step = state["step"]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        x, y, pos = data.batch(stream, step, args.seed, args.batch_size, args.seq_len, cfg.max_position_embeddings)
        logits = model(x, pos)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        state["step"] = step + 1
        state["elapsed_s"] = time.time() - t0
        entry = {"step": step + 1, "loss": round(loss.item(), 4), "lr": round(lr_at(step, args), 6),
                 "grad_norm": round(grad_norm, 3), "elapsed_s": round(state["elapsed_s"], 1)}
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            entry["heldout_austen_loss"] = round(heldout_loss(model, heldout, args.seq_len, max_windows=8), 4)
        state["log"].append(entry)
        tokens = (step + 1) * args.batch_size * args.seq_len
        print(json.dumps(entry), f"tokens {tokens:,} ({tokens / state['elapsed_s']:.0f}/s)", flush=True)
        if (step + 1) % args.checkpoint_every == 0:
            save(ckpt_path)

    state["tokens_seen"] = args.steps * args.batch_size * args.seq_len
    state["cpu"] = platform.processor() or platform.machine()
    save(os.path.join(args.run, "final.pt"))
    save(ckpt_path)
    print(f"done: {state['tokens_seen']:,} tokens in {state['elapsed_s'] / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
