#include "tools/bench_report.h"

#include <algorithm>
#include <cstdio>

namespace nanovllm::cli {

namespace {

double pct(double x, double ceiling) { return ceiling > 0 ? 100.0 * x / ceiling : 0.0; }

}  // namespace

PhaseFigures phase_figures(const ModelConfig& c, const WorkloadRun& run, int64_t kv_elem_bytes,
                           QuantScheme linear, QuantScheme table, const Ceilings& ceilings) {
  PhaseFigures f;
  for (int p : run.prompt_lens) f.prompt_tokens += p;
  for (int o : run.output_lens) f.output_tokens += o;
  f.output_tok_s = double(f.output_tokens) / run.seconds;
  f.total_tok_s = double(f.prompt_tokens + f.output_tokens) / run.seconds;
  f.work = phase_work(c, run.prompt_lens, run.output_lens, kv_elem_bytes);
  f.prefill_seconds = run.progress.prefill_seconds;
  f.decode_seconds = run.progress.decode_seconds;
  f.decode_steps = run.progress.num_decode_steps;
  f.prefill_gflops = f.prefill_seconds > 0 ? f.work.prefill_flops / f.prefill_seconds / 1e9 : 0;
  const double tokens_per_step = f.decode_steps > 0 ? f.work.decode_tokens / double(f.decode_steps) : 1;
  f.step_weight_gb = double(weight_bytes_per_decode_step(c, linear, table, tokens_per_step)) / 1e9;
  f.decode_bytes = double(f.decode_steps) * f.step_weight_gb * 1e9 + f.work.decode_kv_bytes;
  f.decode_gbs = f.decode_seconds > 0 ? f.decode_bytes / f.decode_seconds / 1e9 : 0;
  f.decode_gflops = f.decode_seconds > 0 ? f.work.decode_flops / f.decode_seconds / 1e9 : 0;
  if (ceilings.bandwidth_gbs > 0 && ceilings.peak_gflops > 0) {
    const double peak = ceilings.peak_gflops * 1e9, bw = ceilings.bandwidth_gbs * 1e9;
    const double prefill_bound = f.work.prefill_flops / peak;
    const double decode_bound = std::max(f.decode_bytes / bw, f.work.decode_flops / peak);
    f.bound_seconds = prefill_bound + decode_bound;
    f.bound_total_tok_s = double(f.prompt_tokens + f.output_tokens) / f.bound_seconds;
    // The serial bound: a step's ops wait on one another, so each kind is held to its own
    // ceiling and the kinds add up: the dense linears and the lm_head (every row of the step
    // against each weight), the experts (a few rows each: their bytes), the attention (its KV).
    const double steps = double(f.decode_steps);
    const double expert_bytes = steps * expert_bytes_per_decode_step(c, linear, tokens_per_step);
    const double expert_flops = f.work.decode_tokens * 2.0 * double(expert_params_per_token(c));
    const double dense_bytes = steps * f.step_weight_gb * 1e9 - expert_bytes;
    const double dense_flops = f.work.decode_flops - expert_flops - f.work.decode_attention_flops;
    const double serial_decode =
        std::max(dense_bytes / bw, dense_flops / peak) +
        std::max(expert_bytes / bw, expert_flops / peak) +
        std::max(f.work.decode_kv_bytes / bw, f.work.decode_attention_flops / peak);
    f.serial_bound_seconds = prefill_bound + serial_decode;
    f.serial_bound_total_tok_s = double(f.prompt_tokens + f.output_tokens) / f.serial_bound_seconds;
  }
  return f;
}

void print_phases(const PhaseFigures& f, const Ceilings& k) {
  std::fprintf(stderr,
               "  prefill phase: %lld prompt tokens in %.3f s: %.1f GFLOP (matmuls, causal "
               "attention, lm_head of the last tokens) -> %.1f GFLOP/s of %.1f %s (%.0f%%)\n",
               (long long)f.prompt_tokens, f.prefill_seconds, f.work.prefill_flops / 1e9,
               f.prefill_gflops, k.peak_gflops, k.peak_name.c_str(), pct(f.prefill_gflops, k.peak_gflops));
  std::fprintf(stderr,
               "  decode phase: %.0f tokens in %lld steps, %.3f s: %lld x %.3f GB of weights + "
               "%.3f GB of KV = %.2f GB -> %.1f GB/s of %.1f measured (%.0f%%); %.1f GFLOP -> "
               "%.1f GFLOP/s (%.0f%% of peak)\n",
               f.work.decode_tokens, (long long)f.decode_steps, f.decode_seconds,
               (long long)f.decode_steps, f.step_weight_gb, f.work.decode_kv_bytes / 1e9,
               f.decode_bytes / 1e9, f.decode_gbs, k.bandwidth_gbs, pct(f.decode_gbs, k.bandwidth_gbs),
               f.work.decode_flops / 1e9, f.decode_gflops, pct(f.decode_gflops, k.peak_gflops));
  if (f.bound_seconds > 0) {
    std::fprintf(stderr,
                 "  bound: prefill at peak + each decode step at max(bytes / bandwidth, FLOPs / "
                 "peak) = %.3f s = %.1f total tok/s; measured %.1f total tok/s (%.0f%% of the bound)\n",
                 f.bound_seconds, f.bound_total_tok_s, f.total_tok_s, pct(f.total_tok_s, f.bound_total_tok_s));
    std::fprintf(stderr,
                 "  serial bound: prefill at peak + each decode step's linears, experts and "
                 "attention one after another, each at max(bytes / bandwidth, FLOPs / peak) = "
                 "%.3f s = %.1f total tok/s; measured %.0f%% of it\n",
                 f.serial_bound_seconds, f.serial_bound_total_tok_s,
                 pct(f.total_tok_s, f.serial_bound_total_tok_s));
  }
}

nlohmann::json phases_json(const PhaseFigures& f, const Ceilings& k) {
  nlohmann::json j;
  j["prompt_tokens"] = f.prompt_tokens;
  j["output_tokens"] = f.output_tokens;
  j["output_tok_per_s"] = f.output_tok_s;
  j["total_tok_per_s"] = f.total_tok_s;
  j["prefill_phase_seconds"] = f.prefill_seconds;
  j["prefill_phase_gflops"] = f.prefill_gflops;
  j["prefill_phase_peak_fraction"] = pct(f.prefill_gflops, k.peak_gflops) / 100;
  j["decode_phase_seconds"] = f.decode_seconds;
  j["decode_phase_steps"] = f.decode_steps;
  j["decode_phase_gbs"] = f.decode_gbs;
  j["decode_phase_bandwidth_fraction"] = pct(f.decode_gbs, k.bandwidth_gbs) / 100;
  j["decode_phase_gflops"] = f.decode_gflops;
  j["bound_total_tok_per_s"] = f.bound_total_tok_s;
  j["bound_fraction"] = pct(f.total_tok_s, f.bound_total_tok_s) / 100;
  j["serial_bound_total_tok_per_s"] = f.serial_bound_total_tok_s;
  j["serial_bound_fraction"] = pct(f.total_tok_s, f.serial_bound_total_tok_s) / 100;
  return j;
}

void print_sweep_table(const std::vector<PhaseFigures>& rows, const std::vector<int>& seqs,
                       const Ceilings& k) {
  std::fprintf(stderr,
               "\n| seqs | seconds | output tok/s | total tok/s | prefill GFLOP/s (%% peak) | "
               "decode GB/s (%% bw) | decode GFLOP/s (%% peak) | bound total tok/s | %% of bound | "
               "serial bound | %% of serial bound |\n"
               "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const PhaseFigures& f = rows[i];
    std::fprintf(stderr,
                 "| %d | %.2f | %.1f | %.1f | %.0f (%.0f%%) | %.1f (%.0f%%) | %.0f (%.0f%%) | %.0f "
                 "| %.0f%% | %.0f | %.0f%% |\n",
                 seqs[i], double(f.prompt_tokens + f.output_tokens) / f.total_tok_s, f.output_tok_s,
                 f.total_tok_s, f.prefill_gflops, pct(f.prefill_gflops, k.peak_gflops),
                 f.decode_gbs, pct(f.decode_gbs, k.bandwidth_gbs), f.decode_gflops,
                 pct(f.decode_gflops, k.peak_gflops), f.bound_total_tok_s,
                 pct(f.total_tok_s, f.bound_total_tok_s), f.serial_bound_total_tok_s,
                 pct(f.total_tok_s, f.serial_bound_total_tok_s));
  }
}

}  // namespace nanovllm::cli
