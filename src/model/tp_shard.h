#pragma once
// Tensor-parallel shards of a Qwen3/Qwen2 checkpoint (Megatron / nano-vllm layout):
//   q/k/v_proj (+ biases)  column-parallel by heads: rank r holds query heads
//                          [r Hq/tp, (r+1) Hq/tp) and the KV heads they read (GQA rule):
//                          Hkv >= tp: KV heads [r Hkv/tp, (r+1) Hkv/tp);
//                          Hkv <  tp: the one KV head r Hkv / tp (replicated on tp/Hkv ranks);
//   o_proj                 row-parallel: the input columns of those query heads;
//   gate/up_proj           column-parallel: intermediate rows [r I/tp, (r+1) I/tp);
//   down_proj              row-parallel: the same intermediate columns;
//   MoE experts            each expert as a dense MLP: gate/up rows and down columns
//                          [r I_moe/tp, (r+1) I_moe/tp) (every rank runs every expert on its
//                          slice; the router is replicated, so all ranks route alike);
//   embed_tokens, lm_head  vocab-parallel: vocab rows [r V/tp, (r+1) V/tp) (nano-vllm's
//                          VocabParallelEmbedding / ParallelLMHead); tied: the one slice of
//                          embed_tokens serves as both (read and stored once);
//   norms                  replicated.
// The outputs of o_proj and down_proj are partial sums: the model all-reduces them
// (Backend::all_reduce). The embedding lookup gives this rank's rows and zeros for the other ids
// (Backend::vocab_parallel_embedding): the model all-reduces it too. Each rank's logits cover
// its vocab rows; rank 0 gathers them. tp == 1 is the plain model: whole tables, no all-reduce.
// Each rank reads only its slices from the mapped safetensors files.
#include "backend/backend.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace nanovllm {

struct TpShard {
  int rank = 0;
  int size = 1;
};

// The config one rank's model runs with: num_attention_heads, num_key_value_heads,
// intermediate_size, moe_intermediate_size and vocab_size (its lm_head rows) divided as above; everything else equal.
// Throws Error naming the field that does not divide, before any weight is read.
ModelConfig shard_config(const ModelConfig& full, int tp_size);

// Loads rank's slices of `full`'s checkpoint (shapes checked against the full config; Error
// names the file and tensor). The returned weights match shard_config(full, shard.size):
// embed_tokens is [V/tp, H] from vocab row vocab_start = rank V/tp (vocab_parallel when tp > 1),
// lm_head the same rows of lm_head.weight, or empty when tied (output_projection() is then
// embed_tokens, as load_weights gives).
// quant as load_weights: row shards are quantized after slicing (rows quantize independently);
// column shards (o_proj, down_proj) are cut from the whole weight's quantization, on int4 group
// boundaries (Error with the numbers when a shard would split a group). A checkpoint's own
// quantization (config.quantization_config) is sliced the same way: rows with slice_rows, the
// columns of o_proj / down_proj with slice_cols.
ModelWeights load_weights_shard(const Checkpoint& checkpoint, const ModelConfig& full,
                                TpShard shard, Backend& backend, QuantScheme quant = {});

}  // namespace nanovllm
