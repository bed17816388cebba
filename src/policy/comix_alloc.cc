// CoMix allocation: greedy multiple-choice knapsack (see header).
#include "policy/comix_alloc.h"

#include <algorithm>
#include <limits>
#include <queue>

namespace chorus {
namespace {

struct Upgrade {
  double ratio;  // weighted error reduction per extra byte
  size_t item;
  int to;
  bool operator<(const Upgrade& o) const { return ratio < o.ratio; }
};

// The best upgrade of item i from choice `from` that fits in `free` bytes, if any.
bool BestUpgrade(const ComixItem& it, size_t i, int from, size_t free, Upgrade* out) {
  bool found = false;
  for (int to = from + 1; to < int(std::min(it.choices, kComixMaxChoices)); ++to) {
    const double gain = it.weight * (it.err[from] - it.err[to]);
    if (gain <= 0) continue;
    const size_t extra = it.blocks * (it.bytes[to] > it.bytes[from] ? it.bytes[to] - it.bytes[from] : 0);
    if (extra > free) continue;
    const double ratio = extra == 0 ? std::numeric_limits<double>::infinity() : gain / double(extra);
    if (!found || ratio > out->ratio) *out = Upgrade{ratio, i, to}, found = true;
  }
  return found;
}

}  // namespace

ComixAllocation AllocateComix(const std::vector<ComixItem>& items, size_t capacity) {
  ComixAllocation a;
  a.choice.assign(items.size(), 0);
  for (const ComixItem& it : items) a.cheapest += it.blocks * it.bytes[0];
  a.bytes = a.cheapest;
  if (a.cheapest > capacity) return a;  // infeasible: the caller reports cheapest vs capacity
  a.feasible = true;
  size_t free = capacity - a.cheapest;
  std::priority_queue<Upgrade> heap;
  for (size_t i = 0; i < items.size(); ++i) {
    Upgrade u;
    if (BestUpgrade(items[i], i, 0, free, &u)) heap.push(u);
  }
  while (!heap.empty()) {
    const Upgrade u = heap.top();
    heap.pop();
    const ComixItem& it = items[u.item];
    const int from = a.choice[u.item];
    const size_t extra = it.blocks * (it.bytes[u.to] > it.bytes[from] ? it.bytes[u.to] - it.bytes[from] : 0);
    if (extra > free) {  // stale: recompute what still fits
      Upgrade v;
      if (BestUpgrade(it, u.item, from, free, &v)) heap.push(v);
      continue;
    }
    free -= extra;
    a.bytes += extra;
    a.choice[u.item] = u.to;
    Upgrade v;
    if (BestUpgrade(it, u.item, u.to, free, &v)) heap.push(v);
  }
  for (size_t i = 0; i < items.size(); ++i) a.weighted_err += items[i].weight * items[i].err[a.choice[i]];
  return a;
}

}  // namespace chorus
