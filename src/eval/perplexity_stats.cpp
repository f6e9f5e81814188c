#include "eval/perplexity_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

#include "util/check.h"

namespace nanovllm::eval {

namespace {

constexpr char kMagic[8] = {'N', 'V', 'K', 'L', 'D', '0', '0', '1'};

// log(1 - sum exp(l_i)) for logprobs l_i, -inf when nothing is left.
float rest_of(const std::vector<float>& top) {
  double mass = 0;
  for (float l : top) mass += std::exp(double(l));
  const double rest = 1.0 - mass;
  return rest > 1e-12 ? float(std::log(rest)) : -std::numeric_limits<float>::infinity();
}

}  // namespace

void PerplexityStats::add(double logprob) {
  const double nll = -logprob;
  ++count;
  nll_sum += nll;
  nll2_sum += nll * nll;
}

double PerplexityStats::ppl() const { return std::exp(mean_nll()); }

double PerplexityStats::ppl_error() const {
  if (count < 2) return 0.0;
  const double mean = mean_nll(), var = nll2_sum / double(count) - mean * mean;
  return ppl() * std::sqrt(std::max(0.0, var) / double(count - 1));
}

BaseDistribution BaseDistribution::from_full(const std::vector<float>& logprobs, int32_t token, int k) {
  NV_CHECK(token >= 0 && size_t(token) < logprobs.size() && k >= 0);
  BaseDistribution d;
  d.token_logprob = logprobs[size_t(token)];
  if (k == 0 || size_t(k) >= logprobs.size()) {
    d.full = logprobs;
    return d;
  }
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logprobs[size_t(a)] > logprobs[size_t(b)] || (logprobs[size_t(a)] == logprobs[size_t(b)] && a < b);
  });
  d.top_ids.assign(ids.begin(), ids.begin() + k);
  for (int32_t id : d.top_ids) d.top_logprobs.push_back(logprobs[size_t(id)]);
  d.rest_logprob = rest_of(d.top_logprobs);
  return d;
}

int32_t BaseDistribution::argmax() const {
  if (!top_ids.empty()) return top_ids.front();
  return int32_t(std::max_element(full.begin(), full.end()) - full.begin());
}

void KldStats::add(const BaseDistribution& b, const std::vector<float>& cur, int32_t token) {
  NV_CHECK(token >= 0 && size_t(token) < cur.size());
  double kld = 0;
  if (!b.full.empty()) {
    NV_CHECK(b.full.size() == cur.size(), "base of {} tokens, current {}", b.full.size(), cur.size());
    for (size_t i = 0; i < cur.size(); ++i) {
      const double pb = std::exp(double(b.full[i]));
      if (pb > 0) kld += pb * (double(b.full[i]) - double(cur[i]));
    }
  } else {
    double cur_top_mass = 0;
    for (size_t k = 0; k < b.top_ids.size(); ++k) {
      const double lb = b.top_logprobs[k], lc = cur[size_t(b.top_ids[k])];
      kld += std::exp(lb) * (lb - lc);
      cur_top_mass += std::exp(lc);
    }
    if (std::isfinite(b.rest_logprob)) {
      const double cur_rest = std::max(1.0 - cur_top_mass, 1e-30);
      kld += std::exp(double(b.rest_logprob)) * (double(b.rest_logprob) - std::log(cur_rest));
    }
  }
  klds.push_back(std::max(0.0, kld));  // rounding can make an exact 0 a tiny negative
  const int32_t cur_top = int32_t(std::max_element(cur.begin(), cur.end()) - cur.begin());
  if (cur_top == b.argmax()) ++same_top;
  const double dp = std::exp(double(cur[size_t(token)])) - std::exp(double(b.token_logprob));
  dp2_sum += dp * dp;
  current.add(cur[size_t(token)]);
  base.add(b.token_logprob);
}

double KldStats::mean() const {
  return klds.empty() ? 0.0 : std::accumulate(klds.begin(), klds.end(), 0.0) / double(klds.size());
}

double KldStats::mean_error() const {
  const size_t n = klds.size();
  if (n < 2) return 0.0;
  const double m = mean();
  double ss = 0;
  for (double k : klds) ss += (k - m) * (k - m);
  return std::sqrt(ss / double(n - 1) / double(n));
}

double KldStats::quantile(double q) const {
  if (klds.empty()) return 0.0;
  std::vector<double> v = klds;
  std::sort(v.begin(), v.end());
  const double at = std::clamp(q, 0.0, 1.0) * double(v.size() - 1);
  const size_t lo = size_t(std::floor(at)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - double(lo));
}

double KldStats::rms_dp() const { return klds.empty() ? 0.0 : std::sqrt(dp2_sum / double(klds.size())); }

LogitsFileWriter::LogitsFileWriter(const std::string& path, const LogitsFileHeader& header,
                                   const std::vector<int32_t>& tokens)
    : path_(path), header_(header) {
  NV_CHECK(tokens.size() == size_t(header.num_chunks) * header.ctx);
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) fail("--save-logits {}: cannot create it: {}", path, std::strerror(errno));
  auto* f = static_cast<std::FILE*>(file_);
  uint32_t fields[4] = {header.vocab, header.ctx, header.num_chunks, header.top_k};
  std::fwrite(kMagic, 1, sizeof kMagic, f);
  std::fwrite(fields, 4, 4, f);
  std::fwrite(&header.fingerprint, 8, 1, f);
  std::fwrite(tokens.data(), 4, tokens.size(), f);
}

void LogitsFileWriter::write(const BaseDistribution& d) {
  auto* f = static_cast<std::FILE*>(file_);
  NV_CHECK(f, "write after close");
  std::fwrite(&d.token_logprob, 4, 1, f);
  if (header_.top_k == 0) {
    NV_CHECK(d.full.size() == header_.vocab);
    std::fwrite(d.full.data(), 4, d.full.size(), f);
    return;
  }
  NV_CHECK(d.top_ids.size() == header_.top_k);
  for (size_t k = 0; k < d.top_ids.size(); ++k) {
    std::fwrite(&d.top_ids[k], 4, 1, f);
    std::fwrite(&d.top_logprobs[k], 4, 1, f);
  }
  std::fwrite(&d.rest_logprob, 4, 1, f);
}

void LogitsFileWriter::close() {
  auto* f = static_cast<std::FILE*>(file_);
  if (!f) return;
  file_ = nullptr;
  const bool bad = std::ferror(f) != 0;
  if (std::fclose(f) != 0 || bad) fail("--save-logits {}: writing failed (disk full?)", path_);
}

LogitsFileReader::LogitsFileReader(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) fail("--kl-divergence {}: cannot open it: {}", path, std::strerror(errno));
  auto* f = static_cast<std::FILE*>(file_);
  char magic[8];
  uint32_t fields[4];
  if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, kMagic, 8) != 0) {
    fail("--kl-divergence {}: not a file of `nanovllm perplexity --save-logits`", path);
  }
  if (std::fread(fields, 4, 4, f) != 4 || std::fread(&header_.fingerprint, 8, 1, f) != 1) {
    fail("--kl-divergence {}: truncated header", path);
  }
  header_.vocab = fields[0], header_.ctx = fields[1], header_.num_chunks = fields[2], header_.top_k = fields[3];
  if (header_.vocab == 0 || header_.vocab > (1u << 24) || header_.ctx < 4 || header_.ctx > (1u << 24) ||
      header_.num_chunks == 0 || header_.num_chunks > (1u << 24) || header_.top_k > header_.vocab ||
      uint64_t(header_.ctx) * header_.num_chunks > (uint64_t(1) << 31)) {
    fail("--kl-divergence {}: implausible header (vocab {}, ctx {}, chunks {}, top_k {})", path, header_.vocab,
         header_.ctx, header_.num_chunks, header_.top_k);
  }
  tokens_.resize(size_t(header_.ctx) * header_.num_chunks);
  if (std::fread(tokens_.data(), 4, tokens_.size(), f) != tokens_.size()) fail("--kl-divergence {}: truncated", path);
}

LogitsFileReader::~LogitsFileReader() {
  if (file_) std::fclose(static_cast<std::FILE*>(file_));
}

BaseDistribution LogitsFileReader::next() {
  auto* f = static_cast<std::FILE*>(file_);
  BaseDistribution d;
  bool ok = std::fread(&d.token_logprob, 4, 1, f) == 1;
  if (header_.top_k == 0) {
    d.full.resize(header_.vocab);
    ok = ok && std::fread(d.full.data(), 4, d.full.size(), f) == d.full.size();
  } else {
    d.top_ids.resize(header_.top_k);
    d.top_logprobs.resize(header_.top_k);
    for (size_t k = 0; ok && k < header_.top_k; ++k) {
      ok = std::fread(&d.top_ids[k], 4, 1, f) == 1 && std::fread(&d.top_logprobs[k], 4, 1, f) == 1;
      ok = ok && d.top_ids[k] >= 0 && uint32_t(d.top_ids[k]) < header_.vocab;
    }
    ok = ok && std::fread(&d.rest_logprob, 4, 1, f) == 1;
  }
  if (!ok) fail("--kl-divergence {}: truncated or corrupt (a position's distribution is missing)", path_);
  return d;
}

}  // namespace nanovllm::eval
