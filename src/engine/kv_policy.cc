// KvPolicy's parser, printer and presets (include/chorus/kv_policy.h), and its CoMix options.
#include "chorus/kv_policy.h"

#include <cstdlib>
#include <filesystem>

#include "engine/cocktail_plan.h"  // ValidateCocktailOptions
#include "engine/kv_policy_options.h"
#include "kv/kv_format.h"  // ParseKvFormat
#include "util/status.h"

namespace chorus {
namespace {

constexpr KvPolicyPreset kPresets[] = {
    {"chorus", "kivi4/tq3", "the default: shared blocks kivi4 keys / tq3 values, sink f16 (docs/results/defaults.md)"},
    {"polykv", "q8/tq3", "8-bit keys, tq3 values"},
    {"polykv-paper", "polykv-paper/tq3:s0", "the PolyKV paper's format: no sink block"},
    {"comix", "comix-tq:3", "CoMix: bits per (sequence, layer, K/V) under one budget, 3 bits on average"},
    {"cocktail", "cocktail-tq:3", "CoMix with a document's blocks weighted by relevance to the questions"},
    {"cocktail-paper", "cocktail-paper:0.6:0.1:32", "the Cocktail paper: f16/kivi4/kivi2 per block by relevance"},
};

std::vector<std::string> Split(std::string_view s) {
  std::vector<std::string> parts;
  size_t at = 0;
  for (;;) {
    const size_t colon = s.find(':', at);
    parts.emplace_back(s.substr(at, colon == std::string_view::npos ? std::string_view::npos : colon - at));
    if (colon == std::string_view::npos) return parts;
    at = colon + 1;
  }
}

// The whole of `s` as a number (strtod), or an error naming the spec and what it was for.
Result<double> Number(const std::string& s, std::string_view spec, const char* what) {
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != 0) return Status::Error("policy '{}': '{}' is not a number ({})", spec, s, what);
  return x;
}

Result<size_t> Count(const std::string& s, std::string_view spec, const char* what) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    return Status::Error("policy '{}': '{}' is not a whole number ({})", spec, s, what);
  return size_t(std::strtoul(s.c_str(), nullptr, 10));
}

std::string Num(double x) { return fmt::format("{}", x); }  // shortest round trip

Status CheckTiers(const KvPolicy::Allocator& a, std::string_view spec) {
  if (a.tiers.empty() || a.tiers.size() > 4) return Status::Error("policy '{}': give 1 to 4 tiers of 2, 3, 4, 8", spec);
  for (size_t i = 0; i < a.tiers.size(); ++i) {
    const int b = a.tiers[i];
    if (b != 2 && b != 3 && b != 4 && b != 8)
      return Status::Error("policy '{}': {} is not a tier (valid: 2, 3, 4, 8 = q8)", spec, b);
    if (i > 0 && b <= a.tiers[i - 1]) return Status::Error("policy '{}': tiers must be ascending", spec);
  }
  if (a.min_k_bits != 0 && a.min_k_bits != 2 && a.min_k_bits != 3 && a.min_k_bits != 4 && a.min_k_bits != 8)
    return Status::Error("policy '{}': key floor {} is not a tier (valid: 2, 3, 4, 8)", spec, a.min_k_bits);
  if (a.min_k_bits > a.tiers.back())
    return Status::Error("policy '{}': key floor {} bits is above every tier", spec, a.min_k_bits);
  if (!(a.avg_bits >= 2 && a.avg_bits <= 8))
    return Status::Error("policy '{}': average bits must be between 2 and 8, got {}", spec, a.avg_bits);
  if (!(a.join_reserve >= 0 && a.join_reserve <= 1))
    return Status::Error("policy '{}': join reserve must be in [0, 1], got {}", spec, a.join_reserve);
  return Status::Ok();
}

Result<KvPolicy> ParseUniform(std::string_view spec);

Result<KvPolicy> ParseAllocator(std::string_view spec, bool relevance) {
  const std::vector<std::string> parts = Split(spec);
  const std::string head = parts[0].substr(parts[0].find('-') + 1);
  KvPolicy::Relevance r;
  KvPolicy::Allocator& a = r.allocator;
  if (head == "kivi")
    a.family = KvPolicy::Family::kKivi;
  else if (head != "tq")
    return Status::Error("policy '{}': the family is tq or kivi, got '{}'", spec, head);
  if (parts.size() < 2)
    return Status::Error("policy '{}': write {}-{}:AVG_BITS", spec, relevance ? "cocktail" : "comix", head);
  CHORUS_ASSIGN_OR_RETURN(a.avg_bits, Number(parts[1], spec, "average bits"));
  for (size_t i = 2; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const std::string tail = p.empty() ? "" : p.substr(1);
    if (p == "bound")
      a.rank = KvPolicy::Rank::kBound;
    else if (p == "cal")
      a.rank = KvPolicy::Rank::kCalibrated;
    else if (p == "m")
      a.rank = KvPolicy::Rank::kMeasured;
    else if (p.size() > 1 && p[0] == 't' && tail.find_first_not_of("2348") == std::string::npos) {
      a.tiers.clear();
      for (char c : tail) a.tiers.push_back(c - '0');
    } else if (p.size() > 1 && p[0] == 'k') {
      CHORUS_ASSIGN_OR_RETURN(const size_t k, Count(tail, spec, "key floor"));
      a.min_k_bits = int(k);
    } else if (p.size() > 1 && p[0] == 'j') {
      CHORUS_ASSIGN_OR_RETURN(a.join_reserve, Number(tail, spec, "join reserve"));
    } else if (p.size() > 1 && p[0] == 'f') {
      auto fallback = ParseUniform(tail);
      if (!fallback.ok()) return fallback.status().Context(fmt::format("the fallback (:f) of policy '{}'", spec));
      a.fallback = std::get<KvPolicy::Uniform>(fallback->rule);
    } else if (relevance && p.size() > 1 && p[0] == 'g') {
      CHORUS_ASSIGN_OR_RETURN(r.gain, Number(tail, spec, "relevance gain"));
    } else if (relevance && p == "v") {
      r.values_only = true;
    } else if (relevance && p.size() > 1 && p[0] == 'c') {
      CHORUS_ASSIGN_OR_RETURN(r.chunk_tokens, Count(tail, spec, "chunk tokens"));
    } else {
      return Status::Error(
          "policy '{}': unknown part '{}' (valid: :tTIERS e.g. :t348, :kBITS, :bound, :cal, :m, "
          ":jRESERVE, :fK/V{})",
          spec, p, relevance ? ", :gGAIN, :v, :cCHUNK" : "");
    }
  }
  CHORUS_RETURN_IF_ERROR(CheckTiers(a, spec));
  if (a.fallback && a.rank != KvPolicy::Rank::kMeasured)
    return Status::Error("policy '{}': a fallback (:f) applies only to the measured rank (:m)", spec);
  if (!relevance) return KvPolicy{.rule = a};
  if (!(r.gain >= 0 && r.gain <= 1000))
    return Status::Error("policy '{}': relevance gain must be in [0, 1000], got {}", spec, r.gain);
  CHORUS_RETURN_IF_ERROR(
      ValidateCocktailOptions({.chunk_tokens = r.chunk_tokens}).Context(fmt::format("policy '{}'", spec)));
  return KvPolicy{.rule = r};
}

Result<KvPolicy> ParseCocktailPaper(std::string_view spec) {
  const std::vector<std::string> parts = Split(spec);
  KvPolicy::CocktailPaper c;
  if (parts.size() == 2 || parts.size() > 4)
    return Status::Error("policy '{}': write cocktail-paper or cocktail-paper:ALPHA:BETA[:CHUNK]", spec);
  if (parts.size() >= 3) {
    CHORUS_ASSIGN_OR_RETURN(c.alpha, Number(parts[1], spec, "alpha"));
    CHORUS_ASSIGN_OR_RETURN(c.beta, Number(parts[2], spec, "beta"));
  }
  if (parts.size() == 4) {
    CHORUS_ASSIGN_OR_RETURN(c.chunk_tokens, Count(parts[3], spec, "chunk tokens"));
  }
  CHORUS_RETURN_IF_ERROR(ValidateCocktailOptions({.alpha = c.alpha, .beta = c.beta, .chunk_tokens = c.chunk_tokens})
                             .Context(fmt::format("policy '{}'", spec)));
  return KvPolicy{.rule = c};
}

Result<KvPolicy> ParseUniform(std::string_view spec) {
  const std::vector<std::string> parts = Split(spec);
  KvPolicy::Uniform u;
  const size_t slash = parts[0].find('/');
  u.k = parts[0].substr(0, slash);
  u.v = slash == std::string::npos ? u.k : parts[0].substr(slash + 1);
  for (const std::string& f : {u.k, u.v}) {
    auto parsed = ParseKvFormat(f);
    if (!parsed.ok())
      return Status::Error("policy '{}': {} (or a preset: {}; or comix-…, cocktail-…, cocktail-paper)", spec,
                           parsed.status().message(), [] {
                             std::string names;
                             for (const KvPolicyPreset& p : kPresets)
                               names += (names.empty() ? "" : ", ") + std::string(p.name);
                             return names;
                           }());
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].size() < 2 || parts[i][0] != 's')
      return Status::Error("policy '{}': unknown part '{}' (uniform formats take :sN, N sink blocks)", spec, parts[i]);
    CHORUS_ASSIGN_OR_RETURN(const size_t sink, Count(parts[i].substr(1), spec, "sink blocks"));
    u.sink_blocks = int(sink);
  }
  return KvPolicy{.rule = u};
}

}  // namespace

const char* ToString(KvPolicyKind kind) {
  switch (kind) {
    case KvPolicyKind::kUniform: return "uniform";
    case KvPolicyKind::kAllocator: return "comix";
    case KvPolicyKind::kRelevance: return "cocktail";
    case KvPolicyKind::kCocktailPaper: return "cocktail-paper";
  }
  return "";
}

std::string_view FamilyName(KvPolicy::Family family) { return family == KvPolicy::Family::kKivi ? "kivi" : "tq"; }

Result<KvPolicy> KvPolicy::Parse(std::string_view spec) {
  for (const KvPolicyPreset& p : kPresets)
    if (spec == p.name) return Parse(p.spec);
  if (spec.empty()) return Status::Error("empty KV policy (try chorus, or --help for the grammar)");
  if (spec.rfind("cocktail-paper", 0) == 0) return ParseCocktailPaper(spec);
  if (spec.rfind("comix-", 0) == 0) return ParseAllocator(spec, false);
  if (spec.rfind("cocktail-", 0) == 0) return ParseAllocator(spec, true);
  return ParseUniform(spec);
}

const KvPolicy::Allocator* KvPolicy::allocator() const {
  if (const auto* a = std::get_if<Allocator>(&rule)) return a;
  if (const auto* r = std::get_if<Relevance>(&rule)) return &r->allocator;
  return nullptr;
}

KvPolicy::Allocator* KvPolicy::allocator() {
  return const_cast<Allocator*>(static_cast<const KvPolicy*>(this)->allocator());
}

bool KvPolicy::needs_questions() const {
  return kind() == KvPolicyKind::kRelevance || kind() == KvPolicyKind::kCocktailPaper;
}

size_t KvPolicy::chunk_tokens() const {
  if (const auto* r = std::get_if<Relevance>(&rule)) return r->chunk_tokens;
  if (const auto* c = std::get_if<CocktailPaper>(&rule)) return c->chunk_tokens;
  return 32;
}

std::string FormatSpec(const KvPolicy& p) {
  if (const auto* u = std::get_if<KvPolicy::Uniform>(&p.rule))
    return u->k + "/" + u->v + (u->sink_blocks >= 0 ? fmt::format(":s{}", u->sink_blocks) : "");
  if (const auto* c = std::get_if<KvPolicy::CocktailPaper>(&p.rule))
    return fmt::format("cocktail-paper:{}:{}:{}", Num(c->alpha), Num(c->beta), c->chunk_tokens);
  const KvPolicy::Allocator& a = *p.allocator();
  const auto* r = std::get_if<KvPolicy::Relevance>(&p.rule);
  std::string s = fmt::format("{}-{}:{}", r ? "cocktail" : "comix", FamilyName(a.family), Num(a.avg_bits));
  if (a.tiers != KvPolicy::Allocator{}.tiers) {
    s += ":t";
    for (int b : a.tiers) s += char('0' + b);
  }
  if (a.min_k_bits) s += fmt::format(":k{}", a.min_k_bits);
  if (a.rank == KvPolicy::Rank::kBound) s += ":bound";
  if (a.rank == KvPolicy::Rank::kCalibrated) s += ":cal";
  if (a.rank == KvPolicy::Rank::kMeasured) s += ":m";
  if (a.join_reserve != KvPolicy::Allocator{}.join_reserve) s += ":j" + Num(a.join_reserve);
  if (a.fallback) s += ":f" + FormatSpec(KvPolicy{.rule = *a.fallback});
  if (r) {
    if (r->gain != KvPolicy::Relevance{}.gain) s += ":g" + Num(r->gain);
    if (r->values_only) s += ":v";
    if (r->chunk_tokens != 32) s += fmt::format(":c{}", r->chunk_tokens);
  }
  return s;
}

std::span<const KvPolicyPreset> KvPolicyPresets() { return kPresets; }

std::string KvPolicyHelp() {
  std::string s;
  for (const KvPolicyPreset& p : kPresets) s += fmt::format("  {:<15} = {:<26} {}\n", p.name, p.spec, p.what);
  return s;
}

ComixOptions AllocatorComixOptions(const KvPolicy& policy, const ModelConfig& c) {
  ComixOptions co{.n_layer = c.n_layer, .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim};
  const KvPolicy::Allocator* a = policy.allocator();
  if (a == nullptr) return co;
  co.family = a->family == KvPolicy::Family::kKivi ? ComixFamily::kKivi : ComixFamily::kTq;
  co.avg_bits = a->avg_bits;
  co.tiers = a->tiers;
  co.min_k_bits = a->min_k_bits;
  co.worst_case = a->rank == KvPolicy::Rank::kBound;
  co.calibrated = a->rank == KvPolicy::Rank::kCalibrated;
  co.join_reserve = a->join_reserve;
  if (const auto* r = std::get_if<KvPolicy::Relevance>(&policy.rule)) {
    co.relevance_gain = r->gain;
    co.relevance_values_only = r->values_only;
  }
  return co;
}

namespace {

// Where a :m policy's table is, in order: a table given by path, the one `chorus calibrate` cached
// next to the model, the one the repository ships for this model file. Neither path nor shipped:
// there is none (`cached` is where calibrate would write it).
struct TableLookup {
  std::string path;
  const ShippedCalibrationTable* shipped = nullptr;
  std::string cached;
};
TableLookup FindAllocatorTable(const KvPolicy::Allocator& a, const std::string& model_path, uint64_t fingerprint) {
  if (!a.sensitivity.empty()) return {.path = a.sensitivity};
  const ComixFamily family = a.family == KvPolicy::Family::kKivi ? ComixFamily::kKivi : ComixFamily::kTq;
  TableLookup t{.cached = CalibrationTablePath(model_path, fingerprint, family)};
  if (std::filesystem::exists(t.cached))
    t.path = t.cached;
  else
    t.shipped = FindShippedCalibrationTable(fingerprint, family);
  return t;
}

}  // namespace

Status LoadAllocatorTable(const KvPolicy& policy, ComixOptions& co, const std::string& model_path,
                          uint64_t model_fingerprint) {
  const KvPolicy::Allocator* a = policy.allocator();
  if (a == nullptr || a->rank != KvPolicy::Rank::kMeasured) {
    if (a != nullptr && !a->sensitivity.empty())
      return Status::Error("a sensitivity table ({}) ranks only with the :m rank (policy {})", a->sensitivity,
                           FormatSpec(policy));
    return Status::Ok();
  }
  const TableLookup t = FindAllocatorTable(*a, model_path, model_fingerprint);
  if (t.shipped != nullptr) {
    CHORUS_ASSIGN_OR_RETURN(co.measured,
                            ParseComixSensitivity(t.shipped->json, std::string("shipped table ") + t.shipped->name));
  } else if (!t.path.empty()) {
    CHORUS_ASSIGN_OR_RETURN(co.measured, LoadComixSensitivity(t.path));
  } else {
    return Status::Error(
        "policy {} ranks by a measured table and none is calibrated for this model: run `chorus "
        "calibrate -m {}` (a few minutes; writes {}) or give --comix-sensitivity FILE",
        FormatSpec(policy), model_path, t.cached);
  }
  return Status::Ok();
}

std::string AllocatorTableSource(const KvPolicy& policy, const std::string& model_path, uint64_t model_fingerprint) {
  const KvPolicy::Allocator* a = policy.allocator();
  if (a == nullptr || a->rank != KvPolicy::Rank::kMeasured) return "";
  const TableLookup t = FindAllocatorTable(*a, model_path, model_fingerprint);
  if (t.shipped != nullptr) return std::string("shipped ") + t.shipped->name;
  if (t.path.empty()) return "";
  return t.path == t.cached ? "calibrated " + t.path : t.path;
}

std::string ApplyTableFallback(KvPolicy& policy, const std::string& model_path, uint64_t model_fingerprint) {
  const KvPolicy::Allocator* a = policy.allocator();
  if (a == nullptr || !a->fallback || !AllocatorTableSource(policy, model_path, model_fingerprint).empty()) return "";
  const std::string asked = FormatSpec(policy);
  policy = KvPolicy{.rule = *a->fallback};
  return fmt::format(
      "no calibration table for this model, so policy {} falls back to {}: run `chorus calibrate -m {}` "
      "(a few minutes) to rank by a measured table",
      asked, FormatSpec(policy), model_path);
}

}  // namespace chorus
