// nanovllm bench: nano-vllm's bench.py workload with the napkin math of its phases, then the
// roofline figures (single-sequence decode against memory bandwidth; one fresh prompt of each
// --prefill-lens length, 512 by default, against the GEMM instructions' peak, its causal
// attention FLOPs shown apart so that a long prompt's cost is held against its work); --sweep:
// workloads of 1, 4, 16, 32, 64 sequences of 128 + 128 tokens as a table. Every fraction is of
// the ceilings measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/roofline.h"
#include "engine/llm_engine.h"
#include "model/model_stats.h"
#include "model/weights.h"
#include "nanovllm/llm.h"
#include "tools/bench_report.h"
#include "tools/cli_options.h"
#include "tools/commands.h"
#include "util/bench_workload.h"
#include "util/python_random.h"

namespace nanovllm::cli {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Roofline {
  double decode_seconds_per_token = 0;
  // Each one-token step of that decode, sorted: on a VM whose memory bandwidth moves between
  // phases, its fastest step is the figure to set beside the best-of probe, its median the
  // typical one (the mean above, the token rate, is what a user sees).
  std::vector<double> decode_step_seconds;
  std::vector<double> prefill_seconds;  // one per prefill length
};

// One sequence decoding alone, then one fresh prompt of each length prefilled alone.
Roofline measure_roofline(LLMEngine& engine, uint64_t seed, const std::vector<int>& prefill_lens) {
  Roofline r;
  PythonRandom rng(seed + 1);
  const int vocab = std::min(engine.model_config().vocab_size, 10001);
  auto random_prompt = [&](int n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& t : p) t = int32_t(rng.randint(0, vocab - 1));
    return p;
  };
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.ignore_eos = true;
  sp.max_tokens = 64;
  engine.add_request(random_prompt(32), sp);
  engine.step();  // prefill
  int decode_steps = 0;
  double t0 = now_seconds();
  while (!engine.is_finished()) {
    const double ts = now_seconds();
    StepResult s = engine.step();
    if (s.num_decode_tokens == 1) r.decode_step_seconds.push_back(now_seconds() - ts);
    decode_steps += s.num_decode_tokens;
  }
  r.decode_seconds_per_token = (now_seconds() - t0) / std::max(1, decode_steps);
  std::sort(r.decode_step_seconds.begin(), r.decode_step_seconds.end());

  sp.max_tokens = 1;
  for (int n : prefill_lens) {
    engine.add_request(random_prompt(n), sp);
    t0 = now_seconds();
    while (!engine.is_finished()) engine.step();  // chunked if the budget is smaller
    r.prefill_seconds.push_back(now_seconds() - t0);
  }
  return r;
}

// The packed storage of every weight a decode step reads a share of: each layer's linears (all
// experts of a sparse layer: a step's picks lie anywhere among them) and the output projection;
// not an untied embedding table, of which a step reads one row.
std::vector<cpu::ByteRange> decode_weight_ranges(const ModelWeights& w) {
  std::vector<cpu::ByteRange> ranges;
  auto add = [&](const LinearWeight& l) {
    if (l.n > 0 && l.storage.data()) ranges.push_back({l.storage.data(), l.storage.bytes()});
  };
  for (const LayerWeights& layer : w.layers) {
    for (const LinearWeight* l :
         {&layer.qkv_proj, &layer.o_proj, &layer.gate_up_proj, &layer.down_proj, &layer.router})
      add(*l);
    for (const LinearWeight& e : layer.experts.gate_up) add(e);
    for (const LinearWeight& e : layer.experts.down) add(e);
  }
  add(w.output_projection());
  return ranges;
}

}  // namespace

void add_bench(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("bench", "throughput on nano-vllm's bench.py workload");
  struct Args {
    Config config;
    int num_seqs = 256, max_input_len = 1024, max_output_len = 1024, min_len = 100;
    uint64_t seed = 0;
    bool roofline = true;
    bool sweep = false;
    std::vector<int> prefill_lens = {512};
    SamplingParams constraint;  // --json-schema / --regex / ...: every request constrained
  };
  auto a = std::make_shared<Args>();
  add_engine_flags(*cmd, a->config);
  cmd->add_option("--num-seqs", a->num_seqs, "requests in the workload");
  cmd->add_option("--max-input-len", a->max_input_len, "prompt tokens at most (uniform in [min-len, this])");
  cmd->add_option("--max-output-len", a->max_output_len, "output tokens at most (uniform in [min-len, this])");
  cmd->add_option("--min-len", a->min_len, "prompt and output tokens at least");
  auto* seed = cmd->add_option("--seed", a->seed, "workload seed; given, it also seeds sampling (request i: seed + i), so runs repeat");
  cmd->add_flag("--no-roofline{false}", a->roofline, "skip the decode/prefill roofline figures");
  cmd->add_option("--prefill-lens", a->prefill_lens,
                  "prompt lengths of the roofline's prefill figures, one fresh prompt each (e.g. "
                  "512,4096,16384; each needs --max-model-len above it)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  add_structured_flags(*cmd, a->constraint);
  cmd->add_flag("--sweep", a->sweep,
                "instead of one workload: 1, 4, 16, 32 and 64 sequences of 128 prompt + 128 output "
                "tokens, one table");
  on_run(cmd, commands, [a, seed] {
    a->config.show_progress = false;
    // The KV cache written once before the clock starts, as llama.cpp clears its cache when it
    // creates a context: the timed steps measure the engine, not the first write of each page
    // (on this project's 2-core VMs a fresh page's first write ran at 0.5 GB/s, the host
    // backing it: about 1 s of a 32-sequence workload's prefill).
    a->config.kv_cache_prefault = true;
    if (a->roofline)
      for (int n : a->prefill_lens)
        if (n >= a->config.max_model_len)
          fail("bench: --prefill-lens {} needs --max-model-len above it (it is {}): a prompt and "
               "its one output token must fit",
               n, a->config.max_model_len);
    LLM llm(a->config);
    LLMEngine& engine = llm.engine();
    const ModelConfig& mc = engine.model_config();
    const int64_t kv_elem = int64_t(dtype_size(engine.model_runner().kv_cache_dtype()));

    // Warm-up, as bench.py does.
    SamplingParams warm;
    warm.max_tokens = 16;
    llm.generate(std::vector<std::vector<int32_t>>{{1, 2, 3, 4, 5, 6, 7, 8}}, {warm});

    // The decoder linears' format: --quantization's, or the checkpoint's own (its table stays
    // as stored, bf16).
    const CheckpointQuantization& cq = mc.quantization_config;
    QuantScheme quant = parse_quantization(a->config.quantization), table = embedding_quantization(quant);
    if (cq.enabled()) {
      const bool int4 = cq.bits == 4;
      quant = {int4 ? QuantFormat::Int4 : QuantFormat::Int8,
               cq.method == CheckpointQuantMethod::Fp8 ? cq.block_k : cq.group_size};
      table = {};
    }
    Ceilings ceilings;
    cpu::Ceiling bw_ceiling, peak_ceiling, tile_ceiling;
    // The probes' pools: as many threads as the engine's.
    const int probe_threads = a->config.num_threads > 0 ? a->config.num_threads
                                                        : int(std::thread::hardware_concurrency());
    if (engine.backend().device() == DeviceKind::CPU) {
      cpu::ThreadPool pool(probe_threads);
      // The peak of the instructions the engine's GEMM runs (its backend's ISA): for quantized
      // decoder linears the integer dot product of their format (G ops/s, 2 a multiply-add).
      const auto* cpu_backend = dynamic_cast<const cpu::CpuBackend*>(&engine.backend());
      const cpu::GemmIsa isa = cpu_backend ? cpu_backend->gemm_isa() : cpu::detect_gemm_isa();
      const cpu::QGemmIsa qisa =
          cpu_backend ? cpu_backend->qgemm_isa() : cpu::select_qgemm_isa(cpu::cpu_isa_from_env());
      std::fprintf(stderr, "machine while measuring: %s\n", cpu::machine_load().c_str());
      bw_ceiling = cpu::measure_read_bandwidth(pool);
      peak_ceiling = quant.enabled() ? cpu::measure_qgemm_peak(pool, qisa, quant.format)
                                     : cpu::measure_gemm_peak(pool, isa);
      ceilings.bandwidth_gbs = bw_ceiling.best;
      ceilings.peak_gflops = peak_ceiling.best;
      ceilings.peak_name = std::string(quant.enabled() ? cpu::qgemm_peak_name(qisa, quant.format)
                                                       : cpu::gemm_peak_name(isa)) +
                           " peak";
      std::fprintf(stderr, "ceilings measured now: read bandwidth %s\n  %s: %s\n",
                   cpu::describe(bw_ceiling, "GB/s").c_str(), ceilings.peak_name.c_str(),
                   cpu::describe(peak_ceiling, quant.enabled() ? "G ops/s" : "GFLOP/s").c_str());
      // The bf16 decode tile over L1-resident weights: how this machine runs a loop that loads
      // beside its multiply-adds now, which the register-only peak does not show (roofline.h).
      if (!quant.enabled()) tile_ceiling = cpu::measure_gemm_tile(pool, isa, 16);
      if (tile_ceiling.runs > 0)
        std::fprintf(stderr,
                     "  its 16-sequence decode tile, weights in L1: %s, %.0f%% of that peak\n",
                     cpu::describe(tile_ceiling, "GFLOP/s").c_str(),
                     100 * tile_ceiling.best / peak_ceiling.best);
    }
    const int64_t step_weight_bytes = weight_bytes_per_decode_step(mc, quant, table);
    const double weight_gb = double(step_weight_bytes) / 1e9;
    const double gflop_per_token = matmul_flops_per_token(mc) / 1e9;
    const std::string format =
        quant.enabled() ? fmt::format("{}{} (lm_head {})", cq.enabled() ? cq.method_name() + " as " : "",
                                      quantization_name(quant),
                                      table.enabled() ? quantization_name(table) : "bf16")
                        : "bf16";
    const std::string active =
        mc.is_moe() ? fmt::format(" of one token (its {} of {} experts a layer; a step of n tokens "
                                  "reads the experts they pick)", mc.num_experts_per_tok, mc.num_experts)
                    : "";
    std::fprintf(stderr, "model: %.3f GB of %s weights read per decode step%s, %.3f GFLOP of matmul per prompt token\n",
                 weight_gb, format.c_str(), active.c_str(), gflop_per_token);
    std::fprintf(stderr, "kernels: %s\n", engine.backend().describe().c_str());

    auto run = [&](BenchWorkload w) {
      fold_into_vocabulary(w, mc.vocab_size);  // a no-op for real vocabularies (> 10000 ids)
      WorkloadRun r;
      r.num_seqs = int(w.prompts.size());
      std::vector<SamplingParams> params(w.prompts.size());
      for (size_t i = 0; i < w.prompts.size(); ++i) {
        params[i].temperature = 0.6f;
        params[i].ignore_eos = true;
        params[i].max_tokens = w.max_tokens[i];
        if (seed->count()) params[i].seed = a->seed + i;
        params[i].structured_outputs = a->constraint.structured_outputs;
        r.prompt_lens.push_back(int(w.prompts[i].size()));
      }
      const double t0 = now_seconds();
      const std::vector<GenerationOutput> outs =
          llm.generate(w.prompts, params, nullptr, [&](const GenerateProgress& p) { r.progress = p; });
      r.seconds = now_seconds() - t0;
      // The tokens generated: max_tokens each, unless a constraint's grammar ended an output early.
      for (const GenerationOutput& o : outs) r.output_lens.push_back(int(o.token_ids.size()));
      return phase_figures(mc, r, kv_elem, quant, table, ceilings);
    };

    nlohmann::json j;
    j["device"] = engine.backend().describe();
    j["mem_bandwidth_gbs"] = ceilings.bandwidth_gbs;
    j["bf16_peak_gflops"] = ceilings.peak_gflops;  // the GEMM's instruction peak (peak_name)
    j["peak_name"] = ceilings.peak_name;
    if (bw_ceiling.runs > 0) {
      j["mem_bandwidth_spread_gbs"] = {{"best", bw_ceiling.best}, {"median", bw_ceiling.median},
                                       {"worst", bw_ceiling.worst}, {"runs", bw_ceiling.runs},
                                       {"pattern", bw_ceiling.how}};
      j["peak_spread_gflops"] = {{"best", peak_ceiling.best}, {"median", peak_ceiling.median},
                                 {"worst", peak_ceiling.worst}, {"runs", peak_ceiling.runs}};
      j["machine_load"] = cpu::machine_load();
    }
    if (tile_ceiling.runs > 0)
      j["decode_tile_spread_gflops"] = {{"best", tile_ceiling.best},
                                        {"median", tile_ceiling.median},
                                        {"worst", tile_ceiling.worst},
                                        {"runs", tile_ceiling.runs}};
    j["weight_gb_per_decode_step"] = weight_gb;
    j["weight_format"] = format;
    if (a->sweep) {
      const std::vector<int> sweep = {1, 4, 16, 32, 64};
      std::vector<PhaseFigures> rows;
      nlohmann::json table = nlohmann::json::array();
      for (int n : sweep) {
        rows.push_back(run(make_bench_workload(n, 128, 128, 128, a->seed)));
        std::fprintf(stderr, "%d seqs x (128 + 128) tokens: %.1f total tok/s\n", n, rows.back().total_tok_s);
        print_phases(rows.back(), ceilings);
        nlohmann::json row = phases_json(rows.back(), ceilings);
        row["num_seqs"] = n;
        table.push_back(row);
      }
      print_sweep_table(rows, sweep, ceilings);
      j["sweep"] = table;
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    const StepTimes before = engine.step_times();
    const PhaseFigures f = run(make_bench_workload(a->num_seqs, a->max_input_len, a->max_output_len,
                                                   a->min_len, a->seed));
    j.update(phases_json(f, ceilings));
    {  // where the host's time went, per step of the workload
      const StepTimes& after = engine.step_times();
      const double steps = double(std::max<int64_t>(1, after.steps - before.steps));
      const double seconds = double(f.prompt_tokens + f.output_tokens) / f.total_tok_s;
      const double sched = (after.schedule_s - before.schedule_s) / steps * 1e3,
                   prep = (after.prepare_s - before.prepare_s) / steps * 1e3,
                   exec = (after.execute_s - before.execute_s) / steps * 1e3,
                   post = (after.postprocess_s - before.postprocess_s) / steps * 1e3;
      const double outside = seconds / steps * 1e3 - sched - prep - exec - post;
      std::fprintf(stderr,
                   "steps: %.0f, per step %.3f ms: schedule %.3f, prepare inputs %.3f, execute "
                   "(forward, sample, ids back) %.3f, postprocess %.3f, between steps %.3f\n",
                   steps, seconds / steps * 1e3, sched, prep, exec, post, outside);
      j["step_ms"] = {{"steps", steps},   {"schedule", sched},     {"prepare", prep},
                      {"execute", exec},  {"postprocess", post},   {"between_steps", outside}};
    }
    j["num_seqs"] = a->num_seqs;
    j["seconds"] = double(f.prompt_tokens + f.output_tokens) / f.total_tok_s;
    std::fprintf(stderr, "workload: %d seqs, %lld prompt + %lld output tokens in %.2f s: %.1f output tok/s, %.1f total tok/s\n",
                 a->num_seqs, (long long)f.prompt_tokens, (long long)f.output_tokens,
                 j["seconds"].get<double>(), f.output_tok_s, f.total_tok_s);
    print_phases(f, ceilings);
    if (a->roofline) {
      // The same read over the weights where they lie, just before the decode that streams them:
      // where the machine's memory is not uniform, the ceiling of those bytes (roofline.h).
      cpu::Ceiling in_place;
      if (bw_ceiling.runs > 0) {
        cpu::ThreadPool pool(probe_threads);
        const std::vector<cpu::ByteRange> ranges =
            decode_weight_ranges(engine.model_runner().weights());
        in_place = cpu::measure_read_bandwidth_of(pool, ranges, bw_ceiling.streams, bw_ceiling.nta);
        size_t bytes = 0;
        for (const cpu::ByteRange& range : ranges) bytes += range.bytes;
        j["weights_read_gb"] = double(bytes) / 1e9;
        std::fprintf(stderr, "read bandwidth of the weights in place%s: %s\n",
                     engine.model_runner().tensor_parallel_size() > 1 ? " (rank 0's shard)" : "",
                     cpu::describe(in_place, "GB/s").c_str());
        j["weights_read_gbs"] = {{"best", in_place.best},
                                 {"median", in_place.median},
                                 {"worst", in_place.worst},
                                 {"runs", in_place.runs},
                                 {"pattern", in_place.how}};
      }
      Roofline r = measure_roofline(engine, a->seed, a->prefill_lens);
      const double bw = ceilings.bandwidth_gbs, peak = ceilings.peak_gflops;
      const double decode_gbs = weight_gb / r.decode_seconds_per_token;
      j["decode_1seq_ms_per_token"] = r.decode_seconds_per_token * 1e3;
      j["decode_1seq_weight_gbs"] = decode_gbs;
      j["decode_bandwidth_fraction"] = bw > 0 ? decode_gbs / bw : 0.0;
      std::fprintf(stderr,
                   "decode, 1 seq: %.2f ms/token -> %.3f GB / %.4f s = %.1f GB/s of %.1f GB/s measured (%.0f%%)\n",
                   r.decode_seconds_per_token * 1e3, weight_gb, r.decode_seconds_per_token, decode_gbs,
                   bw, bw > 0 ? 100 * decode_gbs / bw : 0.0);
      if (in_place.best > 0) {
        j["decode_weights_read_fraction"] = decode_gbs / in_place.best;
        std::fprintf(stderr, "  of the weights' %.1f GB/s in place: %.0f%%\n", in_place.best,
                     100 * decode_gbs / in_place.best);
      }
      if (const std::vector<double>& st = r.decode_step_seconds; !st.empty()) {
        const double fastest = st.front(), median = st[st.size() / 2], slowest = st.back();
        // "93.10 ms (85% of the bandwidth, 97% of the weights' in place)"
        auto step = [&](double sec, const char* bw_name, const char* in_place_name) {
          std::string out = fmt::format("{:.2f} ms ({:.0f}%{}", sec * 1e3,
                                        bw > 0 ? 100 * weight_gb / sec / bw : 0.0, bw_name);
          if (in_place.best > 0)
            out += fmt::format(", {:.0f}%{}", 100 * weight_gb / sec / in_place.best, in_place_name);
          return out + ")";
        };
        std::fprintf(stderr, "  its %zu steps: fastest %s, median %s, slowest %s\n", st.size(),
                     step(fastest, " of the bandwidth", " of the weights' in place").c_str(),
                     step(median, "", "").c_str(), step(slowest, "", "").c_str());
        j["decode_1seq_step_ms"] = {{"steps", st.size()},
                                    {"fastest", fastest * 1e3},
                                    {"median", median * 1e3},
                                    {"slowest", slowest * 1e3}};
      }
      // Each prompt: the matmuls of its tokens, the lm_head of its last, and its causal attention
      // (query t attends to t + 1 keys), which grows with the square of the length.
      nlohmann::json lens = nlohmann::json::array();
      for (size_t i = 0; i < a->prefill_lens.size(); ++i) {
        const int n = a->prefill_lens[i];
        const double s = r.prefill_seconds[i];
        const double matmul = (double(n) * matmul_flops_per_token(mc) + lm_head_flops(mc)) / 1e9;
        const double attn = attention_flops(mc, double(n) * (n + 1) / 2) / 1e9;
        const double gflops = (matmul + attn) / s;
        nlohmann::json row = {{"tokens", n}, {"seconds", s}, {"matmul_gflop", matmul},
                              {"attention_gflop", attn}, {"gflops", gflops},
                              {"peak_fraction", peak > 0 ? gflops / peak : 0.0}};
        lens.push_back(row);
        if (i == 0) {  // the first length's figures, under the keys scripts read
          j["prefill_tokens"] = n;
          j["prefill_seconds"] = s;
          j["prefill_gflops"] = gflops;
          j["prefill_peak_fraction"] = row["peak_fraction"];
        }
        std::fprintf(stderr,
                     "prefill, %d tokens: %.3f s -> %.1f GFLOP of matmul + %.1f GFLOP of attention "
                     "(%.0f%%) = %.1f GFLOP/s of %.1f GFLOP/s %s (%.0f%%)\n",
                     n, s, matmul, attn, 100 * attn / (matmul + attn), gflops, peak,
                     ceilings.peak_name.c_str(),
                     peak > 0 ? 100 * gflops / peak : 0.0);
      }
      j["prefill_lens"] = lens;
    }
    // KV capacity: the cache's bytes hold this many tokens in the chosen dtype; the same bytes
    // in the other dtype hold (2 bytes / 1 byte per element) twice or half as many.
    {
      const ModelRunner& runner = engine.model_runner();
      const int64_t blocks = runner.num_kv_blocks(), bs = a->config.block_size;
      const int64_t bytes = blocks * int64_t(runner.kv_block_bytes());
      const int64_t elem = int64_t(dtype_size(runner.kv_cache_dtype()));
      const int64_t per_token_elem = int64_t(runner.kv_block_bytes()) / elem / bs;  // 2 L Hkv D
      const int64_t tokens_bf16 = bytes / (per_token_elem * 2 * bs) * bs;
      const int64_t tokens_fp8 = bytes / (per_token_elem * bs) * bs;
      const bool fp8 = runner.kv_cache_dtype() == DType::F8E4M3;
      j["kv_cache_dtype"] = fp8 ? "fp8" : "bf16";
      j["kv_cache_bytes"] = bytes;
      j["kv_cache_tokens"] = blocks * bs;
      j["kv_cache_tokens_bf16"] = tokens_bf16;
      j["kv_cache_tokens_fp8"] = tokens_fp8;
      std::fprintf(stderr,
                   "KV cache: %s, %lld blocks x %lld tokens = %lld tokens in %.3f GB (%lld bytes "
                   "per token), written once before the timed steps; the same bytes hold %lld "
                   "tokens in bf16, %lld in fp8\n",
                   fp8 ? "fp8 (E4M3)" : "bf16", (long long)blocks, (long long)bs,
                   (long long)(blocks * bs), double(bytes) / 1e9,
                   (long long)(per_token_elem * elem), (long long)tokens_bf16,
                   (long long)tokens_fp8);
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  });
}

}  // namespace nanovllm::cli
