#!/usr/bin/env python3
"""Evaluate the exported model folder exactly as an engine would load it.

The weights are read back from model.safetensors (bf16) and cast to fp32, so every number
here is the fp32 forward of the bf16-rounded weights. Writes:
  <model>/reference_logprobs.json  for the first --ref-tokens tokens of the Moby Dick text:
                                   the ids, each token's logprob given its prefix (the first
                                   token has none: null) and the top-5 (id, logprob) per
                                   position (the prediction for the NEXT token)
  <eval-out>                       held-out losses / perplexities and sample continuations
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (see train.py)
import argparse
import json
import math

import torch
import torch.nn.functional as F

import data
import safetensors_io
from model import Config, Qwen3

PROMPTS = ["It is a truth universally acknowledged", "Elizabeth", "Mr. Darcy", "Emma Woodhouse, handsome,",
           "The weather was", "\"My dear"]


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        hf = json.load(f)
    cfg = Config(**{k: hf[k] for k in Config.__dataclass_fields__})
    model = Qwen3(cfg)
    tensors = {k[len("model."):]: v.float() for k, v in safetensors_io.load(os.path.join(model_dir, "model.safetensors")).items()}
    model.load_state_dict(tensors)
    return model.eval()


@torch.no_grad()
def heldout(model, ids, seq_len, batch=8):
    """Mean loss over non-overlapping windows (data.chunks), `batch` full windows at a time."""
    windows = data.chunks(ids, seq_len)
    full = [w for w in windows if len(w) == seq_len + 1]
    groups = [torch.stack(full[i:i + batch]) for i in range(0, len(full), batch)]
    groups += [w[None] for w in windows if len(w) != seq_len + 1]  # the short last window
    total, count = 0.0, 0
    for g in groups:  # g: [b, T + 1]
        logits = model(g[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), g[:, 1:].reshape(-1), reduction="sum").item()
        count += g[:, 1:].numel()
    return {"tokens": count, "loss": round(total / count, 4), "perplexity": round(math.exp(total / count), 2)}


@torch.no_grad()
def reference_logprobs(model, ids):
    x = torch.tensor(ids)[None]
    logp = torch.log_softmax(model(x)[0].double(), dim=-1)  # [T, vocab]
    top = logp.topk(5, dim=-1)
    return {
        "description": "fp32 forward of the bf16-rounded weights (torch); token_logprobs[i] = "
                       "log p(ids[i] | ids[:i]) (null for i = 0); top5[i] = the 5 most likely "
                       "next tokens after ids[:i+1], as [id, logprob]",
        "text_source": "heldout_moby_dick.txt (training/corpus.py), first tokens",
        "ids": ids,
        "token_logprobs": [None] + [round(logp[i - 1, ids[i]].item(), 6) for i in range(1, len(ids))],
        "top5": [[[j, round(v, 6)] for j, v in zip(top.indices[i].tolist(), top.values[i].tolist())]
                 for i in range(len(ids))],
        "mean_nll": round(-sum(logp[i - 1, ids[i]].item() for i in range(1, len(ids))) / (len(ids) - 1), 6),
    }


@torch.no_grad()
def generate(model, ids, max_tokens, stop, temperature=0.0, top_k=0, top_p=1.0, seed=0):
    """Plain recompute-everything decoding: greedy at temperature 0, else top-k/top-p sampling."""
    g = torch.Generator().manual_seed(seed)
    ids = list(ids)
    out = []
    for _ in range(max_tokens):
        logits = model(torch.tensor(ids)[None])[0, -1].double()
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            if top_k:
                probs[probs < probs.topk(top_k).values[-1]] = 0
            sorted_p, order = probs.sort(descending=True)
            keep = sorted_p.cumsum(0) - sorted_p < top_p * sorted_p.sum()
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
            nxt = int(torch.multinomial(probs / probs.sum(), 1, generator=g))
        if nxt in stop:
            break
        ids.append(nxt)
        out.append(nxt)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--corpus", default="build/training/corpus")
    ap.add_argument("--eval-out", default="build/training/eval.json")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--ref-tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = load_model(args.model)
    tok = data.load_tokenizer(args.model)
    moby = data.tokenize_file(tok, os.path.join(args.corpus, "heldout_moby_dick.txt"))
    austen = data.tokenize_file(tok, os.path.join(args.corpus, "heldout_austen.txt"))

    ref = reference_logprobs(model, moby[:args.ref_tokens])
    with open(os.path.join(args.model, "reference_logprobs.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"reference logprobs: {len(ref['ids'])} tokens, mean nll {ref['mean_nll']}", flush=True)

    result = {"heldout_austen": heldout(model, austen, args.seq_len)}
    print("held-out Austen", result["heldout_austen"], flush=True)
    result["heldout_moby_dick"] = heldout(model, moby, args.seq_len)
    print("held-out Moby Dick", result["heldout_moby_dick"], flush=True)

    stop = {tok.added["<|endoftext|>"], tok.added["<|im_end|>"]}
    samples = []
    for prompt in PROMPTS:
        ids = tok.encode(prompt)
        greedy = tok.decode(generate(model, ids, 40, stop))
        sampled = [tok.decode(generate(model, ids, 60, stop, 0.7, 40, 0.95, seed)) for seed in (1, 2)]
        samples.append({"prompt": prompt, "greedy_40": greedy, "sampled_t0.7_k40_p0.95": sampled})
        print(json.dumps(samples[-1], ensure_ascii=False), flush=True)
    result["samples"] = samples
    os.makedirs(os.path.dirname(args.eval_out), exist_ok=True)
    with open(args.eval_out, "w") as f:
        json.dump(result, f, indent=2, ensure_ascii=False)


if __name__ == "__main__":
    main()
