#!/usr/bin/env python3
"""Write the trained model as a Hugging Face Qwen3 folder (next to the tokenizer files).

<out>/config.json             Qwen3ForCausalLM, head_dim explicit, tied embeddings, bf16
<out>/generation_config.json  eos [<|im_end|>, <|endoftext|>] and sampling defaults
<out>/model.safetensors       bf16 (round to nearest even), HF tensor names, no lm_head.weight
"""
import argparse
import json
import os

import torch

import data
import safetensors_io
from model import Config, Qwen3


def hf_config(cfg, tok):
    eot = tok.added["<|endoftext|>"]
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "max_window_layers": cfg.num_hidden_layers,
        "model_type": "qwen3",
        "num_attention_heads": cfg.num_attention_heads,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_key_value_heads": cfg.num_key_value_heads,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": cfg.rope_theta,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": cfg.vocab_size,
    }


def generation_config(tok):
    return {
        "bos_token_id": tok.added["<|endoftext|>"],
        "do_sample": True,
        "eos_token_id": [tok.added["<|im_end|>"], tok.added["<|endoftext|>"]],
        "pad_token_id": tok.added["<|endoftext|>"],
        "temperature": 0.7,
        "top_k": 40,
        "top_p": 0.95,
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default="build/training/run/final.pt")
    ap.add_argument("--out", default="models/default")
    args = ap.parse_args()

    ckpt = torch.load(args.checkpoint)
    cfg = Config(**ckpt["config"])
    model = Qwen3(cfg)
    model.load_state_dict(ckpt["model"])
    tok = data.load_tokenizer(args.out)
    if len(tok.vocab) + len(tok.added) != cfg.vocab_size:
        raise SystemExit(f"{args.out}/tokenizer.json has {len(tok.vocab) + len(tok.added)} ids, model {cfg.vocab_size}")

    write_json(os.path.join(args.out, "config.json"), hf_config(cfg, tok))
    write_json(os.path.join(args.out, "generation_config.json"), generation_config(tok))
    tensors = {name: t.detach().to(torch.bfloat16) for name, t in model.hf_state_dict().items()}
    path = os.path.join(args.out, "model.safetensors")
    safetensors_io.save(tensors, path, metadata={"format": "pt"})
    back = safetensors_io.load(path)
    assert all(torch.equal(back[k], tensors[k]) for k in tensors), "safetensors round trip failed"
    print(f"{path}: {len(tensors)} tensors, {sum(t.numel() for t in tensors.values()):,} parameters, "
          f"{os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
