#pragma once
// nanovllm bench's napkin math: each phase of a workload (prefill, decode) against this
// machine's ceilings measured in the same run (read bandwidth, bf16 peak), and the sweep table.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/hf_config.h"
#include "model/model_stats.h"
#include "nanovllm/llm.h"

namespace nanovllm::cli {

struct Ceilings {
  double bandwidth_gbs = 0;  // 0: not measured (not the CPU)
  double peak_gflops = 0;
  std::string peak_name = "bf16 peak";  // the instructions the peak was measured with
};

// One workload as run: its shape, its wall time and the engine's per-phase counters.
struct WorkloadRun {
  int num_seqs = 0;
  std::vector<int> prompt_lens, output_lens;
  double seconds = 0;
  GenerateProgress progress;
};

// The figures of one run, per phase: achieved rates, fractions of the ceilings, and the bounds
// (each phase at the larger of its bytes / bandwidth and its FLOPs / peak; the serial bound
// holds each kind of op of a decode step to its own ceiling).
struct PhaseFigures {
  int64_t prompt_tokens = 0, output_tokens = 0;
  double output_tok_s = 0, total_tok_s = 0;
  PhaseWork work;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;
  double prefill_gflops = 0;  // achieved
  double decode_bytes = 0;    // weights once per decode step + the KV the decode tokens read
  double step_weight_gb = 0;  // weights one decode step reads (at the mean tokens per step)
  double decode_gbs = 0, decode_gflops = 0;
  double bound_seconds = 0;   // 0 when the ceilings are unknown
  double bound_total_tok_s = 0;
  // The same with a step's ops one after another (the dense linears and lm_head, the experts,
  // the attention each at the larger of its bytes / bandwidth and its FLOPs / peak), as a
  // step runs them: the other bound lets one op's memory traffic overlap another's arithmetic.
  double serial_bound_seconds = 0;
  double serial_bound_total_tok_s = 0;
};

// linear / table: the run's weight formats; a decode step reads weight_bytes_per_decode_step
// (model_stats.h) at the run's mean tokens per decode step (a MoE model reads more experts the
// more tokens a step holds; a dense one the same bytes at any size).
PhaseFigures phase_figures(const ModelConfig& c, const WorkloadRun& run, int64_t kv_elem_bytes,
                           QuantScheme linear, QuantScheme table, const Ceilings& ceilings);
// Human lines (stderr) and the JSON fields of one run's phases.
void print_phases(const PhaseFigures& f, const Ceilings& ceilings);
nlohmann::json phases_json(const PhaseFigures& f, const Ceilings& ceilings);
// The sweep's table (stdout is kept for the JSON: this goes to stderr).
void print_sweep_table(const std::vector<PhaseFigures>& rows, const std::vector<int>& seqs,
                       const Ceilings& ceilings);

}  // namespace nanovllm::cli
