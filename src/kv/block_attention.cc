// BlockAttention: streaming softmax over compressed blocks and native rows (see block_attention.h).
#include "kv/block_attention.h"

#include <algorithm>
#include <cmath>

#include "kv/attention_math.h"  // SoftmaxFold, ScoreF16Rows, AccumulateF16Rows
#include "kv/hadamard.h"        // HadamardRotate, HadamardRotateInverse
#include "ops/cpu_target.h"     // AmxInt8Enabled
#include "ops/elementwise.h"    // Dot, Axpy, Scale
#include "util/check.h"         // CHORUS_CHECK
#include "util/fp16.h"          // F16ToF32

namespace chorus {
namespace {
constexpr size_t kQuPadRows = 16;  // an AMX query tile's rows: QueryQ8::qp has this many zero rows past n_q
}  // namespace

void SoftmaxState::Reset(size_t n_q, size_t head_dim) {
  m.assign(n_q, -INFINITY);
  l.assign(n_q, 0.0f);
  o.assign(n_q * head_dim, 0.0f);
}

BlockAttention::BlockAttention(const KvGeometry& geometry) : g_(geometry) {
  for (KvFormat f : kAllKvFormats) kernels_[static_cast<size_t>(f)] = GetKvBlockKernels(f);
  tmp_.resize(g_.head_dim);
  part_tmp_.resize(PartStateFloats(g_.head_dim));
}

void BlockAttention::Reserve(size_t max_q) {
  const size_t hd = g_.head_dim;
  for (SoftmaxState* st : {&plain_, &rot_}) {
    st->m.reserve(max_q);
    st->l.reserve(max_q);
    st->o.reserve(max_q * hd);
  }
  q_rot_.reserve(max_q * hd);
  q8_.reserve((max_q + kQuPadRows) * hd);
  q8_scale_.reserve(max_q);
  q8_bias_.reserve(max_q);
  scores_.reserve(max_q * kBlockTokens);
  part_acc_.resize(std::max(part_acc_.size(), max_q * PartStateFloats(hd)));
}

size_t BlockAttention::bytes() const {
  size_t floats = q_rot_.capacity() + scores_.capacity() + tmp_.capacity() + part_acc_.capacity() +
                  part_tmp_.capacity() + q8_scale_.capacity();
  for (const SoftmaxState* st : {&plain_, &rot_}) floats += st->m.capacity() + st->l.capacity() + st->o.capacity();
  return sizeof(*this) + floats * sizeof(float) + q8_.capacity() +
         q8_bias_.capacity() * sizeof(int32_t);
}

size_t BlockAttention::BytesFor(const KvGeometry& g, size_t max_q) {
  const size_t hd = g.head_dim;
  return sizeof(BlockAttention) +
         (2 * (2 * max_q + max_q * hd) + max_q * hd + max_q * kBlockTokens + hd + (max_q + 1) * PartStateFloats(hd) +
          max_q) * sizeof(float) +
         (max_q + kQuPadRows) * hd + max_q * sizeof(int32_t);
}

void BlockAttention::Begin(const float* q, size_t n_q) {
  q_ = q;
  n_q_ = n_q;
  have_q_rot_ = false;
  q8_keys_ = KvFormat::kF16;
  q8_shift_ = 0;
  plain_.Reset(n_q, g_.head_dim);
  rot_.m.clear();
  scores_.resize(n_q * kBlockTokens);
}


void BlockAttention::Update(SoftmaxState& st, size_t q0, size_t nq, size_t n_rows) {
  SoftmaxFold(scores_.data(), nq, kBlockTokens, n_rows, st.m.data() + q0, st.l.data() + q0,
              st.o.data() + q0 * g_.head_dim, g_.head_dim);
}

void RotateHeads(const KeyRope& rope, int64_t pos, float* heads, size_t n, size_t head_dim, float* cos_sin) {
  CHORUS_CHECK(rope.rope_dim > 0 && rope.rope_dim <= head_dim);
  RopeTable(pos, rope.rope_dim, rope.params, cos_sin);
  for (size_t i = 0; i < n; ++i) {
    if (rope.neox)
      RopeApplyNeox(heads + i * head_dim, rope.rope_dim, cos_sin);
    else
      RopeApply(heads + i * head_dim, rope.rope_dim, cos_sin);
  }
}

const float* BlockAttention::Queries(int32_t shift, bool rotated, const KeyRope* rope) {
  if (shift == 0 && !rotated) return q_;
  if (!have_q_rot_ || q_rot_shift_ != shift || q_rot_hadamard_ != rotated) {
    const size_t hd = g_.head_dim;
    q_rot_.assign(q_, q_ + n_q_ * hd);
    if (shift != 0) {
      CHORUS_CHECK(rope != nullptr);  // a shifted block needs its layer's RoPE
      RotateHeads(*rope, -int64_t{shift}, q_rot_.data(), n_q_, hd, tmp_.data());
    }
    if (rotated)
      for (size_t i = 0; i < n_q_; ++i) HadamardRotate(q_rot_.data() + i * hd, hd);
    have_q_rot_ = true;
    q_rot_shift_ = shift;
    q_rot_hadamard_ = rotated;
  }
  return q_rot_.data();
}

QueryQ8 BlockAttention::QuantizedQueries(KvFormat keys, int32_t shift, const KeyRope* rope) {
  if (q8_keys_ != keys || q8_shift_ != shift) {  // a table mixing tq4 and q8 key groups quantizes again at each switch
    const size_t hd = g_.head_dim;
    const float* q = Queries(shift, KvFormatIsRotated(keys), rope);
    q8_padded_ = n_q_ >= kQuPadRows && AmxInt8Enabled();  // the tile kernels read 16 rows at a time
    q8_.resize((n_q_ + (q8_padded_ ? kQuPadRows : 0)) * hd);
    q8_scale_.resize(n_q_);
    q8_bias_.resize(n_q_);
    QuantizeQueriesQ8(q, n_q_, hd, q8_.data(), q8_scale_.data(), q8_bias_.data(), keys);
    std::fill(q8_.begin() + n_q_ * hd, q8_.end(), int8_t{0});
    q8_keys_ = keys;
    q8_shift_ = shift;
  }
  return {q8_.data(), q8_scale_.data(), q8_bias_.data(), q8_padded_ ? q8_.data() : nullptr};
}

namespace {

// Head `kv_head`'s key and value tiles of a block: where they start and how long they are. A
// decode step attends every block of a long context once, the blocks are separate allocations out
// of cache (the weights stream through L3 between two layers' attention), and the hardware
// prefetcher sees no stream across them: AddBlocks requests each tile itself, twice — into L2
// kL2Ahead blocks ahead, then into L1 one block ahead of the kernel that reads it (the next key tile
// before this block's scores, the next value tile before its sums). This decoded faster than both
// tiles into L1 (or L2) one block ahead and than both L1 requests at the block's start; 4 or 16 blocks
// ahead into L2 were no better than 8 (docs/results/design-measurements.md, HeadTiles prefetch).
struct HeadTiles {
  KvFormat kf, vf;
  size_t k_off, v_off, k_bytes, v_bytes;
  HeadTiles(const KvGeometry& g, KvFormat k, KvFormat v, uint32_t kv_head)
      : kf(k),
        vf(v),
        k_off(KvHeadTileOffset(k, KvSide::kKey, g, kv_head)),
        v_off(KvHeadTileOffset(v, KvSide::kValue, g, kv_head)),
        k_bytes(KvHeadTileBytes(k, KvSide::kKey, g.head_dim)),
        v_bytes(KvHeadTileBytes(v, KvSide::kValue, g.head_dim)) {}
};

inline constexpr size_t kL2Ahead = 8;  // blocks

template <int kLocality>  // 3: into L1, 2: into L2
inline void PrefetchLines(const uint8_t* p, size_t n) {
  for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, kLocality);
}

// kSides: 1 the key tile, 2 the value tile, 3 both. `t`: the group's tiles (another format's are
// computed).
template <int kLocality, int kSides>
inline void PrefetchHeadTiles(const KvGeometry& g, const HeadTiles& t, const BlockView& b, uint32_t kv_head) {
  const HeadTiles o = b.k_format == t.kf && b.v_format == t.vf ? t : HeadTiles(g, b.k_format, b.v_format, kv_head);
  if constexpr ((kSides & 1) != 0) PrefetchLines<kLocality>(b.k + o.k_off, o.k_bytes);
  if constexpr ((kSides & 2) != 0) PrefetchLines<kLocality>(b.v + o.v_off, o.v_bytes);
}

}  // namespace

void BlockAttention::AddBlocks(std::span<const BlockView> blocks, uint32_t kv_head, size_t q0, size_t nq,
                               size_t skip_first, const KeyRope* rope) {
  const size_t hd = g_.head_dim, n = blocks.size();
  nq = std::min(nq, n_q_ - q0);
  // Runs of equal (K, V) formats are one group: kernels, query and state are looked up once per
  // group (a table reordered by format — KvSequence::ReorderByFormat — is a few long groups).
  for (size_t b0 = 0; b0 < n;) {
    const KvFormat kf = blocks[b0].k_format, vf = blocks[b0].v_format;
    const int32_t shift = blocks[b0].shift;
    size_t b1 = b0 + 1;
    while (b1 < n && blocks[b1].k_format == kf && blocks[b1].v_format == vf && blocks[b1].shift == shift) ++b1;
    ++groups_;
    const KvBlockKernels& kk = kernels_[static_cast<size_t>(kf)];
    const KvBlockKernels& vk = kernels_[static_cast<size_t>(vf)];
    const HeadTiles tiles(g_, kf, vf, kv_head);
    const float* q = Queries(shift, KvFormatIsRotated(kf), rope) + q0 * hd;
    QueryQ8 q8{};  // integer key scores (tq4, q8, kivi4 keys) where the CPU has them
    if (kk.score_q8 && kf == KvFormat::kKivi4) {
      q8.f = q;  // kivi4 keys: quantized per block inside the kernel (their channel scales differ per block)
    } else if (kk.score_q8) {
      const QueryQ8 all = QuantizedQueries(kf, shift, rope);
      q8 = {all.q + q0 * hd, all.scale + q0, all.bias + q0, all.qp ? all.qp + q0 * hd : nullptr};
    }
    // integer value sums (tq3 / tq4 values) where the CPU has them; other head_dims fall back inside
    const KvAccumulateFn accumulate = vk.accumulate_q8 ? vk.accumulate_q8 : vk.accumulate;
    SoftmaxState& st = KvFormatIsRotated(vf) ? rot_ : plain_;
    if (st.m.empty()) st.Reset(n_q_, hd);
    for (size_t b = b0; b < std::min(b1, b0 + kL2Ahead); ++b) PrefetchHeadTiles<2, 3>(g_, tiles, blocks[b], kv_head);
    for (size_t b = b0; b < b1; ++b) {
      if (b + kL2Ahead < n) PrefetchHeadTiles<2, 3>(g_, tiles, blocks[b + kL2Ahead], kv_head);
      if (b + 1 < n) PrefetchHeadTiles<3, 1>(g_, tiles, blocks[b + 1], kv_head);
      if (kk.score_q8)
        kk.score_q8(g_, blocks[b].k, kv_head, q8, nq, scores_.data(), kBlockTokens);
      else
        kk.score(g_, blocks[b].k, kv_head, q, nq, scores_.data(), kBlockTokens);
      const size_t skip = std::max<size_t>(blocks[b].skip, b == 0 ? skip_first : 0);
      if (skip > 0)
        for (size_t i = 0; i < nq; ++i) std::fill_n(scores_.data() + i * kBlockTokens, skip, -INFINITY);
      if (b + 1 < n) PrefetchHeadTiles<3, 2>(g_, tiles, blocks[b + 1], kv_head);
      Update(st, q0, nq, kBlockTokens);
      accumulate(g_, blocks[b].v, kv_head, scores_.data(), nq, st.o.data() + q0 * hd, kBlockTokens);
    }
    b0 = b1;
  }
}

void BlockAttention::AddNative(const uint16_t* k, const uint16_t* v, size_t stride, size_t n_rows, size_t q0,
                               size_t nq) {
  const size_t hd = g_.head_dim;
  nq = std::min(nq, n_q_ - q0);
  for (size_t r0 = 0; r0 < n_rows; r0 += kBlockTokens) {
    const size_t nr = std::min<size_t>(kBlockTokens, n_rows - r0);
    ScoreF16Rows(q_ + q0 * hd, nq, hd, k + r0 * stride, stride, nr, scores_.data(), kBlockTokens);
    Update(plain_, q0, nq, nr);
    AccumulateF16Rows(scores_.data(), nq, kBlockTokens, v + r0 * stride, stride, nr, plain_.o.data() + q0 * hd, hd);
  }
}

void BlockAttention::Finish(float* out, size_t q0, size_t nq) {
  const size_t hd = g_.head_dim;
  nq = std::min(nq, n_q_ - q0);
  const bool has_rot = !rot_.m.empty();
  for (size_t r = 0; r < nq; ++r) {
    const size_t i = q0 + r;
    float* o = out + r * hd;
    const float mp = plain_.m[i], mr = has_rot ? rot_.m[i] : -INFINITY;
    const float m = std::max(mp, mr);
    const float cp = mp == -INFINITY ? 0.0f : std::exp(mp - m);
    const float cr = mr == -INFINITY ? 0.0f : std::exp(mr - m);
    const float denom = plain_.l[i] * cp + (has_rot ? rot_.l[i] * cr : 0.0f);
    const float inv = denom > 0 ? 1.0f / denom : 0.0f;
    for (size_t c = 0; c < hd; ++c) o[c] = plain_.o[i * hd + c] * cp * inv;
    if (has_rot && cr > 0) {
      std::copy_n(rot_.o.data() + i * hd, hd, tmp_.data());
      HadamardRotateInverse(tmp_.data(), hd);
      Axpy(cr * inv, tmp_.data(), hd, o);
    }
  }
}

void BlockAttention::Restart() {
  plain_.Reset(n_q_, g_.head_dim);
  rot_.m.clear();
}

void BlockAttention::ExportPart(size_t i, float* dst) const {
  const size_t hd = g_.head_dim;
  float* r = dst + hd + 2;
  dst[0] = plain_.m[i];
  r[0] = rot_.m.empty() ? -INFINITY : rot_.m[i];
  // An empty state is its m alone (MergeParts reads no more of it).
  if (dst[0] != -INFINITY) {
    dst[1] = plain_.l[i];
    std::copy_n(plain_.o.data() + i * hd, hd, dst + 2);
  }
  if (r[0] != -INFINITY) {
    r[1] = rot_.l[i];
    std::copy_n(rot_.o.data() + i * hd, hd, r + 2);
  }
}

namespace {

// One (m, l, o) state: acc ⊕= src. The larger max's side is scaled by exp(0) = 1: left as is.
void MergeState(float* acc, const float* src, size_t hd) {
  const float ms = src[0], ma = acc[0];
  if (ms == -INFINITY) return;
  if (ma == -INFINITY) {
    std::copy_n(src, hd + 2, acc);
    return;
  }
  if (ms <= ma) {
    const float cs = std::exp(ms - ma);
    acc[1] += src[1] * cs;
    Axpy(cs, src + 2, hd, acc + 2);
  } else {
    const float ca = std::exp(ma - ms);
    acc[0] = ms;
    acc[1] = acc[1] * ca + src[1];
    Scale(acc + 2, hd, ca);
    for (size_t c = 0; c < hd; ++c) acc[2 + c] += src[2 + c];
  }
}

}  // namespace

void BlockAttention::MergeParts(float* acc, const float* src, size_t n, size_t hd) {
  const size_t stride = PartStateFloats(hd);
  for (size_t i = 0; i < n; ++i, acc += stride, src += stride) {
    MergeState(acc, src, hd);
    MergeState(acc + hd + 2, src + hd + 2, hd);
  }
}

void BlockAttention::FinishParts(const float* acc, size_t n, float* out) {
  const size_t hd = g_.head_dim, stride = PartStateFloats(hd);
  for (size_t i = 0; i < n; ++i, acc += stride, out += hd) {
    const float* r = acc + hd + 2;
    const float mp = acc[0], mr = r[0];
    const float m = std::max(mp, mr);
    const float cp = mp == -INFINITY ? 0.0f : std::exp(mp - m);
    const float cr = mr == -INFINITY ? 0.0f : std::exp(mr - m);
    const float denom = (mp == -INFINITY ? 0.0f : acc[1] * cp) + (mr == -INFINITY ? 0.0f : r[1] * cr);
    const float inv = denom > 0 ? 1.0f / denom : 0.0f;
    for (size_t c = 0; c < hd; ++c) out[c] = mp == -INFINITY ? 0.0f : acc[2 + c] * cp * inv;
    if (cr > 0) {
      std::copy_n(r + 2, hd, tmp_.data());
      HadamardRotateInverse(tmp_.data(), hd);
      Axpy(cr * inv, tmp_.data(), hd, out);
    }
  }
}

void BlockAttentionRef(const KvGeometry& g, std::span<const BlockView> blocks, uint32_t kv_head,
                       const uint16_t* native_k, const uint16_t* native_v, size_t stride, size_t n_native,
                       const float* q, size_t n_q, float* out, const KeyRope* rope) {
  const size_t hd = g.head_dim, kv_dim = g.n_head_kv * hd;
  std::vector<float> keys, vals;  // (n_ctx, hd) this head, original domain
  std::vector<int32_t> shifts;    // (n_ctx) the shift of each key's block
  std::vector<float> kb(kBlockTokens * kv_dim), vb(kBlockTokens * kv_dim);
  for (const BlockView& b : blocks) {
    DecodeKvBlockRef(b.k_format, KvSide::kKey, g, b.k, kb.data());
    DecodeKvBlockRef(b.v_format, KvSide::kValue, g, b.v, vb.data());
    for (size_t j = b.skip; j < kBlockTokens; ++j) {
      shifts.push_back(b.shift);
      keys.insert(keys.end(), kb.begin() + j * kv_dim + kv_head * hd, kb.begin() + j * kv_dim + (kv_head + 1) * hd);
      vals.insert(vals.end(), vb.begin() + j * kv_dim + kv_head * hd, vb.begin() + j * kv_dim + (kv_head + 1) * hd);
    }
  }
  for (size_t j = 0; j < n_native; ++j) {
    shifts.push_back(0);
    for (size_t c = 0; c < hd; ++c) {
      keys.push_back(F16ToF32(native_k[j * stride + c]));
      vals.push_back(F16ToF32(native_v[j * stride + c]));
    }
  }
  const size_t n = keys.size() / hd;
  std::vector<double> s(n);
  std::vector<float> qs(hd), cs(hd);
  for (size_t i = 0; i < n_q; ++i) {
    double m = -INFINITY;
    int32_t have = 0;  // the shift qs is rotated for
    qs.assign(q + i * hd, q + (i + 1) * hd);
    for (size_t j = 0; j < n; ++j) {
      if (shifts[j] != have) {
        qs.assign(q + i * hd, q + (i + 1) * hd);
        if (shifts[j] != 0) RotateHeads(*rope, -int64_t{shifts[j]}, qs.data(), 1, hd, cs.data());
        have = shifts[j];
      }
      double acc = 0;
      for (size_t c = 0; c < hd; ++c) acc += double(qs[c]) * keys[j * hd + c];
      s[j] = acc;
      m = std::max(m, acc);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (size_t c = 0; c < hd; ++c) {
      double acc = 0;
      for (size_t j = 0; j < n; ++j) acc += s[j] * vals[j * hd + c];
      out[i * hd + c] = static_cast<float>(acc / sum);
    }
  }
}

}  // namespace chorus
