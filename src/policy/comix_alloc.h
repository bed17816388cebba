// CoMix allocation: a multiple-choice knapsack over items (one per agent × layer × side). Every
// item starts at its cheapest choice; the upgrade with the largest (weighted bound reduction /
// extra bytes) is applied while the byte capacity holds (greedy on a heap, O(items · log items)).
// Invariant: a feasible result never spends more than `capacity` bytes; when even the cheapest
// choices do not fit, the result is infeasible and says by how much.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

namespace chorus {

inline constexpr size_t kComixChoices = 3;  // b = 2, 3, 4
inline constexpr std::array<int, kComixChoices> kComixBits = {2, 3, 4};

struct ComixItem {
  double weight = 1;                          // readers (a shared context read by k agents: k)
  size_t blocks = 0;                          // blocks still to be sealed with this item's choice
  std::array<double, kComixChoices> err{};    // error bound per choice (non-increasing is not required)
  std::array<size_t, kComixChoices> bytes{};  // real bytes of one block side per choice (metadata included)
};

struct ComixAllocation {
  std::vector<int> choice;  // (items) index into kComixBits
  bool feasible = false;
  size_t bytes = 0;         // Σ blocks · bytes[choice]
  size_t cheapest = 0;      // Σ blocks · bytes[0]
  double weighted_err = 0;  // Σ weight · err[choice]
};

ComixAllocation AllocateComix(const std::vector<ComixItem>& items, size_t capacity);

}  // namespace chorus
