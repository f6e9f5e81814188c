#pragma once
// The arithmetic of `nanovllm perplexity` (llama.cpp's llama-perplexity and its
// --kl-divergence), pure and device-free so that tests check it on known distributions.
//
// Perplexity: over the scored tokens (the second half of each --ctx chunk), PPL = exp(mean NLL),
// NLL = -log p(token | its prefix); its error is propagated from the standard error of the mean
// NLL (PPL * SE(NLL)), as llama-perplexity prints it.
//
// KL divergence against a base model's saved distributions: per scored position
// KLD(base || current) = sum_i p_base(i) (log p_base(i) - log p_current(i)). A base saved in full
// gives the exact sum; a base saved as its top k (ids and logprobs) plus the rest of its mass
// gives the sum over those k tokens plus the rest as one bucket (a lower bound of the full KLD,
// by the log-sum inequality; exact when the rest is 0). Also, as llama.cpp: the share of
// positions whose most likely token is the same, and the RMS of delta p = p_current(token) -
// p_base(token) for the token that came next.
#include <cstdint>
#include <string>
#include <vector>

namespace nanovllm::eval {

// Running perplexity over scored tokens.
struct PerplexityStats {
  int64_t count = 0;
  double nll_sum = 0, nll2_sum = 0;

  void add(double logprob);  // the logprob of the token that came next
  double mean_nll() const { return count ? nll_sum / double(count) : 0.0; }
  double ppl() const;
  double ppl_error() const;  // PPL * standard error of the mean NLL (0 below 2 tokens)
};

// One scored position of a base model: its distribution (full: logprobs by token id; or top k
// with the log of the remaining mass) and the logprob of the token that came next.
struct BaseDistribution {
  std::vector<float> full;            // [V] logprobs by id, when saved in full
  std::vector<int32_t> top_ids;       // [k] when saved as top k, most likely first
  std::vector<float> top_logprobs;    // [k]
  float rest_logprob = 0;             // log(1 - sum exp(top_logprobs)); -inf when nothing is left
  float token_logprob = 0;            // log p_base(token that came next)

  // From a full distribution: kept whole (k == 0) or as its top k plus the rest.
  static BaseDistribution from_full(const std::vector<float>& logprobs, int32_t token, int k);
  int32_t argmax() const;
};

// KL divergence and friends over scored positions.
struct KldStats {
  std::vector<double> klds;  // per position
  int64_t same_top = 0;      // positions whose argmax agrees
  double dp2_sum = 0;        // sum of (p_current(token) - p_base(token))^2
  PerplexityStats current, base;

  // current: the current model's logprobs by token id [V] at the same position.
  void add(const BaseDistribution& base, const std::vector<float>& current, int32_t token);
  double mean() const;
  double mean_error() const;  // standard error of the mean KLD
  double quantile(double q) const;  // of the per-position KLD (q in [0, 1]); 0 when empty
  double max() const { return quantile(1.0); }
  double same_top_fraction() const { return klds.empty() ? 0.0 : double(same_top) / double(klds.size()); }
  double rms_dp() const;
};

// The file --save-logits writes and --kl-divergence reads (little-endian):
//   "NVKLD001", u32 vocab, u32 ctx, u32 num_chunks, u32 top_k (0: full), u64 fingerprint of the
//   model (vocab and config), then i32 tokens [num_chunks * ctx], then per scored position in
//   order: f32 token_logprob, and either f32 [vocab] or top_k x (i32 id, f32 logprob) + f32 rest.
struct LogitsFileHeader {
  uint32_t vocab = 0, ctx = 0, num_chunks = 0, top_k = 0;
  uint64_t fingerprint = 0;
};

class LogitsFileWriter {
 public:
  LogitsFileWriter(const std::string& path, const LogitsFileHeader& header, const std::vector<int32_t>& tokens);
  const LogitsFileHeader& header() const { return header_; }
  void write(const BaseDistribution& d);
  void close();  // Error if anything failed to write

 private:
  std::string path_;
  LogitsFileHeader header_;
  std::vector<char> buffer_;
  void* file_ = nullptr;  // FILE*
};

class LogitsFileReader {
 public:
  // Error naming the file when it is not such a file, is truncated, or does not match: the
  // expected header fields (vocab, ctx, chunks, top_k is read as is) and tokens.
  explicit LogitsFileReader(const std::string& path);
  ~LogitsFileReader();
  const LogitsFileHeader& header() const { return header_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  BaseDistribution next();  // Error at the end of the file

 private:
  std::string path_;
  LogitsFileHeader header_;
  std::vector<int32_t> tokens_;
  void* file_ = nullptr;  // FILE*
};

}  // namespace nanovllm::eval
