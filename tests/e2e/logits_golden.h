// llama.cpp logits goldens (top-k log-probabilities per position, written by scripts/ref/llama_logits.py
// and scripts/ref/llama_shapes_goldens.py; format in docs/EVAL.md §2) and the agreement of chorus's
// logits with them: top-1 and a lower bound of KL(llama.cpp ‖ chorus) over the top-k ids plus one
// bucket for the remaining mass (by the data-processing inequality it never exceeds the full KL).
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/sampler.h"    // ArgMax
#include "ops/elementwise.h"  // LogSumExp

namespace chorus::testing {

struct LogitsGolden {
  size_t n_pos = 0, k = 0, n_vocab = 0;
  std::vector<int32_t> tokens, top_ids;  // (n_pos), (n_pos, k)
  std::vector<float> top_logprobs;       // (n_pos, k)
  nlohmann::json header;
};

inline LogitsGolden LoadLogitsGolden(const std::string& json_path) {
  LogitsGolden g;
  std::ifstream hf(json_path);
  EXPECT_TRUE(hf) << "missing " << json_path;
  if (!hf) return g;
  g.header = nlohmann::json::parse(hf);
  g.n_pos = g.header["n_pos"];
  g.k = g.header["k"];
  g.n_vocab = g.header["n_vocab"];
  const std::string dir = json_path.substr(0, json_path.rfind('/') + 1);
  std::ifstream bf(dir + g.header["bin_file"].get<std::string>(), std::ios::binary);
  std::vector<char> bin((std::istreambuf_iterator<char>(bf)), {});
  for (const auto& s : g.header["sections"]) {
    const size_t off = s["offset"], nb = s["nbytes"];
    EXPECT_LE(off + nb, bin.size());
    if (off + nb > bin.size()) continue;
    auto copy = [&](auto& v) {
      v.resize(nb / sizeof(v[0]));
      std::memcpy(v.data(), bin.data() + off, nb);
    };
    if (s["name"] == "tokens") copy(g.tokens);
    if (s["name"] == "top_ids") copy(g.top_ids);
    if (s["name"] == "top_logprobs") copy(g.top_logprobs);
  }
  return g;
}

struct LogitsAgreement {
  size_t positions = 0, agree = 0;
  double kl_sum = 0, kl_max = 0;
  double top1() const { return positions ? double(agree) / positions : 0; }
  double kl_mean() const { return positions ? kl_sum / positions : 0; }

  // Adds rows [pos0, pos0 + rows) of chorus's logits (rows, n_vocab).
  void Add(const LogitsGolden& g, size_t pos0, const float* logits, size_t rows) {
    const size_t V = g.n_vocab;
    for (size_t r = 0; r < rows; ++r) {
      const size_t p = pos0 + r;
      const float* row = logits + r * V;
      const double lse = LogSumExp(row, V);
      const int32_t* ids = g.top_ids.data() + p * g.k;
      const float* ref_lp = g.top_logprobs.data() + p * g.k;
      // llama.cpp's argmax is its top-1; ties within float noise count as agreement.
      const int32_t mine = ArgMax(row, V);
      if (mine == ids[0] || std::fabs(row[mine] - row[ids[0]]) < 1e-4f) ++agree;
      double kl = 0, p_rest = 1, q_rest = 1;
      for (size_t i = 0; i < g.k; ++i) {
        const double lp = ref_lp[i], lq = row[ids[i]] - lse;
        kl += std::exp(lp) * (lp - lq);
        p_rest -= std::exp(lp);
        q_rest -= std::exp(lq);
      }
      if (p_rest > 1e-12 && q_rest > 1e-12) kl += p_rest * std::log(p_rest / q_rest);
      kl_sum += kl;
      kl_max = std::max(kl_max, kl);
      ++positions;
    }
  }
};

}  // namespace chorus::testing
