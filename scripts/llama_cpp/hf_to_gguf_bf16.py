#!/usr/bin/env python3
"""Converts a Hugging Face Qwen3 / Qwen2 / Llama / Mistral / Qwen3-MoE / Mixtral folder in bf16 to a bf16 GGUF file for llama.cpp.

A yardstick tool: it lets llama.cpp run the very weights nanovllm runs (scripts/llama_cpp/
side_by_side.sh). It needs only the standard library, numpy and the `gguf` package found in the
llama.cpp checkout given (gguf-py/), not torch or transformers.

  hf_to_gguf_bf16.py --llama-cpp /work/llama.cpp MODEL_DIR OUT.gguf

Weights keep their bf16 bits (GGML type BF16); 1-D tensors (the RMSNorm weights, biases) become
f32, exactly (bf16 is the top half of an f32), as llama.cpp's own converter does.

Llama and Mistral run on llama.cpp's "llama" architecture, whose RoPE rotates adjacent pairs
(Meta's layout) where Hugging Face's checkpoints rotate halves: their q_proj / k_proj rows are
reordered per head back to pairs. llama3 RoPE scaling becomes llama.cpp's rope_freqs tensor (one
divisor of each frequency).

Mixtures of experts: Qwen3-MoE runs on llama.cpp's "qwen3moe" architecture (which always
renormalizes the top-k weights, as norm_topk_prob true does; every layer sparse), Mixtral on
"llama" with experts. The per-expert gate / up / down weights are stacked into llama.cpp's
ffn_{gate,up,down}_exps tensors ([E, I, H] and [E, H, I]); the router (ffn_gate_inp) is written
in f32 as llama.cpp's converter keeps it.
"""

import argparse
import json
import os
import struct
import sys
from pathlib import Path

import numpy as np

# Hugging Face's per-layer names -> llama.cpp's (gguf-py constants.py, MODEL_TENSOR names).
LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
GLOBAL_NAMES = {
    "model.embed_tokens": "token_embd",
    "model.norm": "output_norm",
    "lm_head": "output",
}
ARCHES = {"Qwen3ForCausalLM": "qwen3", "Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama",
          "MistralForCausalLM": "llama", "Qwen3MoeForCausalLM": "qwen3moe",
          "MixtralForCausalLM": "llama"}
# Expert weights: Qwen3-MoE's and Mixtral's names -> llama.cpp's stacked tensor.
EXPERT_NAMES = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps",
                "w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}
gguf = None  # the gguf module of the llama.cpp checkout, imported in main()


def die(msg):
    sys.exit(f"hf_to_gguf_bf16: {msg}")


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        die(f"{path} is missing")
    except json.JSONDecodeError as e:
        die(f"{path} is not valid JSON: {e}")


def safetensors_tensors(path):
    """Yields (name, numpy view) for each tensor of one .safetensors file, memory-mapped.

    The format: an 8-byte little-endian header length, a JSON header
    {name: {dtype, shape, data_offsets: [begin, end]}} (offsets relative to the data after it).
    bf16 tensors come back as uint16 arrays holding the raw bits.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            die(f"{path}: too short for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            die(f"{path}: header length {n} runs past the file ({size} bytes)")
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype == "BF16":
            np_dtype = np.uint16
        elif dtype == "F32":
            np_dtype = np.float32
        else:
            die(f"{path}: tensor {name} is {dtype}; this converter takes bf16 (or f32) checkpoints")
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * np.dtype(np_dtype).itemsize or end > data.size:
            die(f"{path}: tensor {name}: offsets [{begin}, {end}) do not match shape {shape} {dtype}")
        yield name, dtype, data[begin:end].view(np_dtype).reshape(shape)


def gguf_name(hf_name):
    """model.layers.3.mlp.up_proj.weight -> blk.3.ffn_up.weight; None for names we do not know."""
    stem, _, suffix = hf_name.rpartition(".")
    if suffix not in ("weight", "bias"):
        return None
    if stem in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[stem]}.{suffix}"
    parts = stem.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in LAYER_NAMES:
        return f"blk.{int(parts[2])}.{LAYER_NAMES[parts[3]]}.{suffix}"
    return None


def expert_part(hf_name):
    """model.layers.3.mlp.experts.7.up_proj.weight -> (3, 7, "ffn_up_exps"); a router
    (...mlp.gate.weight, ...block_sparse_moe.gate.weight) -> (3, None, "ffn_gate_inp"); else None."""
    parts = hf_name.split(".")
    if len(parts) < 5 or parts[:2] != ["model", "layers"] or parts[-1] != "weight":
        return None
    layer = int(parts[2])
    if parts[3] in ("mlp", "block_sparse_moe") and parts[4] == "gate" and len(parts) == 6:
        return layer, None, "ffn_gate_inp"
    if len(parts) == 8 and parts[3] in ("mlp", "block_sparse_moe") and parts[4] == "experts" \
            and parts[6] in EXPERT_NAMES:
        return layer, int(parts[5]), EXPERT_NAMES[parts[6]]
    return None


def halves_to_pairs(w, n_head):
    """Rows of each head from rotate-half order [x_0 .. x_{d/2-1}, y_0 .. y_{d/2-1}] to adjacent
    pairs [x_0, y_0, x_1, y_1, ...]: [n_head * d, ...] -> the same shape."""
    d = w.shape[0] // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_divisors(config, head_dim):
    """llama.cpp's rope_freqs: f_j / divisor_j = transformers' llama3-scaled frequency."""
    s = config["rope_scaling"]
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    theta = float(config.get("rope_theta", 10000.0))
    out = []
    for j in range(head_dim // 2):
        f = theta ** (-2.0 * j / head_dim)
        wavelen = 2 * np.pi / f
        if wavelen < old_len / high:
            out.append(1.0)
        elif wavelen > old_len / low:
            out.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def bf16_to_f32(bits):
    """bf16 bits (uint16) -> float32 with the same value (bf16 is the top 16 bits of an f32)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def load_vocab(model_dir, vocab_size):
    """Tokens, token types and merges in llama.cpp's 'gpt2' (byte-level BPE) form."""
    tok = read_json(model_dir / "tokenizer.json")
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        die(f"tokenizer.json: model type {model.get('type')!r}; only byte-level BPE is handled")
    by_id = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    top = max(list(by_id) + list(added)) if by_id or added else -1
    if top >= vocab_size:
        die(f"tokenizer.json has token id {top}, past the model's vocab_size {vocab_size}")
    TokenType = gguf.TokenType
    tokens, types = [], []
    for i in range(vocab_size):  # the embedding has vocab_size rows: pad the ids no token uses
        if i in added:
            a = added[i]
            tokens.append(a["content"])
            # <|...|> tokens are control tokens to llama.cpp's loader even when not "special"
            control = a.get("special") or (a["content"].startswith("<|") and a["content"].endswith("|>"))
            types.append(TokenType.CONTROL if control else TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
    # merges are "a b" strings in older tokenizer.json files and [a, b] pairs in newer ones
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges, tok


def special_ids(model_dir, config, tok):
    """bos/eos/pad ids: tokenizer_config.json's tokens by content first, else config.json's ids."""
    content_to_id = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
    tc_path = model_dir / "tokenizer_config.json"
    tc = read_json(tc_path) if tc_path.exists() else {}
    gen_path = model_dir / "generation_config.json"
    gen = read_json(gen_path) if gen_path.exists() else {}
    ids = {}
    for kind in ("bos", "eos", "pad"):
        content = tc.get(f"{kind}_token")
        if isinstance(content, dict):
            content = content.get("content")
        value = content_to_id.get(content) if content else None
        if value is None:
            value = config.get(f"{kind}_token_id", gen.get(f"{kind}_token_id"))
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            ids[kind] = int(value)
    return ids, bool(tc.get("add_bos_token", False))


def convert(model_dir, out_path):
    config = read_json(model_dir / "config.json")
    archs = config.get("architectures") or []
    if not archs or archs[0] not in ARCHES:
        die(f"{model_dir}/config.json: architectures {archs}; handled: {sorted(ARCHES)}")
    arch = ARCHES[archs[0]]
    scaling = config.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in ("default", "llama3") or (rope_type == "llama3" and arch != "llama"):
        die(f"config.json: rope_scaling {scaling} is not handled (plain RoPE, or llama3 on Llama)")
    if config.get("sliding_window") and archs[0] == "MistralForCausalLM":
        die("config.json: Mistral's sliding_window is not handled")
    moe = archs[0] in ("Qwen3MoeForCausalLM", "MixtralForCausalLM")
    n_experts = config.get("num_experts", config.get("num_local_experts", 0)) if moe else 0
    if moe and (config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1):
        die("config.json: dense layers among the sparse ones (mlp_only_layers, decoder_sparse_step) "
            "are not handled: llama.cpp's qwen3moe makes every layer sparse")
    if archs[0] == "Qwen3MoeForCausalLM" and not config.get("norm_topk_prob", False):
        die("config.json: norm_topk_prob false is not handled: llama.cpp's qwen3moe renormalizes")
    hidden = config["hidden_size"]
    n_heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // n_heads
    n_layers = config["num_hidden_layers"]
    vocab_size = config["vocab_size"]
    tied = config.get("tie_word_embeddings", False)

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        die(f"{model_dir} has no .safetensors file")

    tmp_path = out_path.with_name(out_path.name + ".tmp")  # renamed when complete
    w = gguf.GGUFWriter(str(tmp_path), arch)
    w.add_name(model_dir.name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_block_count(n_layers)
    w.add_context_length(config.get("max_position_embeddings", 4096))
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(config["intermediate_size"])
    if moe:
        w.add_expert_count(n_experts)
        w.add_expert_used_count(config["num_experts_per_tok"])
        w.add_expert_feed_forward_length(config.get("moe_intermediate_size", config["intermediate_size"]))
    w.add_head_count(n_heads)
    w.add_head_count_kv(config.get("num_key_value_heads", n_heads))
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    w.add_vocab_size(vocab_size)

    tokens, types, merges, tok = load_vocab(model_dir, vocab_size)
    w.add_tokenizer_model("gpt2")
    # Qwen2 and Qwen3 share the pre-tokenizer regex; Llama 3's is llama.cpp's "llama-bpe".
    w.add_tokenizer_pre("llama-bpe" if arch == "llama" else "qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    ids, add_bos = special_ids(model_dir, config, tok)
    if "bos" in ids:
        w.add_bos_token_id(ids["bos"])
    if "eos" in ids:
        w.add_eos_token_id(ids["eos"])
    if "pad" in ids:
        w.add_pad_token_id(ids["pad"])
    w.add_add_bos_token(add_bos)

    seen = set()
    n_kv_heads = config.get("num_key_value_heads", n_heads)
    if rope_type == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_divisors(config, head_dim))
    experts = {}  # (layer, stacked name) -> {expert: [rows, cols] bf16 bits}
    for path in files:
        for name, dtype, arr in safetensors_tensors(path):
            if name == "lm_head.weight" and tied:
                continue  # llama.cpp reuses token_embd when `output` is absent
            part = expert_part(name) if moe else None
            if part and part[1] is None:  # the router, f32
                target = f"blk.{part[0]}.ffn_gate_inp.weight"
                w.add_tensor(target, bf16_to_f32(arr) if dtype == "BF16" else np.asarray(arr))
                seen.add(target)
                continue
            if part:
                if dtype != "BF16":
                    die(f"{path.name}: expert tensor {name} is {dtype}; bf16 expected")
                experts.setdefault((part[0], part[2]), {})[part[1]] = arr
                continue
            target = gguf_name(name)
            if target is None:
                die(f"{path.name}: tensor {name} has no llama.cpp name in this converter")
            if arch == "llama" and (".attn_q." in target or ".attn_k." in target):
                arr = halves_to_pairs(np.asarray(arr), n_heads if ".attn_q." in target else n_kv_heads)
            if arr.ndim == 1:  # norms, biases: f32 as llama.cpp expects
                w.add_tensor(target, bf16_to_f32(arr) if dtype == "BF16" else np.asarray(arr))
            elif dtype == "BF16":  # numpy [rows, cols] is GGML's ne = [cols, rows]: no transpose
                w.add_tensor(target, arr, raw_dtype=gguf.GGMLQuantizationType.BF16)
            else:
                w.add_tensor(target, np.asarray(arr))
            seen.add(target)
    for (layer, stacked), by_expert in sorted(experts.items()):
        if sorted(by_expert) != list(range(n_experts)):
            die(f"layer {layer}: {stacked} has experts {sorted(by_expert)[:4]}..., expected 0..{n_experts - 1}")
        target = f"blk.{layer}.{stacked}.weight"  # [E, rows, cols]: GGML ne = [cols, rows, E]
        w.add_tensor(target, np.stack([np.asarray(by_expert[e]) for e in range(n_experts)]),
                     raw_dtype=gguf.GGMLQuantizationType.BF16)
        seen.add(target)
    needed = {"token_embd.weight", "output_norm.weight"} | ({"output.weight"} if not tied else set())
    missing = needed - seen
    ffn = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps") if moe else ("ffn_gate", "ffn_up", "ffn_down")
    for i in range(n_layers):
        for short in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm") + ffn:
            if f"blk.{i}.{short}.weight" not in seen:
                missing.add(f"blk.{i}.{short}.weight")
    if missing:
        die(f"{model_dir}: missing tensors {sorted(missing)[:8]}")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp_path, out_path)
    print(f"wrote {out_path} ({arch}, {n_layers} layers, vocab {vocab_size}, {len(seen)} tensors, "
          f"{os.path.getsize(out_path) / 1e9:.2f} GB)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp checkout (its gguf-py/ is used)")
    ap.add_argument("model_dir", help="Hugging Face folder: config.json, *.safetensors, tokenizer.json")
    ap.add_argument("out", help="GGUF file to write")
    args = ap.parse_args()
    gguf_py = Path(args.llama_cpp) / "gguf-py"
    if not (gguf_py / "gguf" / "gguf_writer.py").exists():
        die(f"{gguf_py}/gguf not found: --llama-cpp must be a llama.cpp checkout")
    sys.path.insert(0, str(gguf_py))
    global gguf
    import gguf  # noqa: E402 (from the checkout given)

    model_dir = Path(args.model_dir)
    if not model_dir.is_dir():
        die(f"{model_dir} is not a folder")
    convert(model_dir, Path(args.out))


if __name__ == "__main__":
    main()
