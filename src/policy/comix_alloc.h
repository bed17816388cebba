// CoMix allocation: a multiple-choice knapsack over items (one per unit × chunk run × layer × side:
// CoMix has one run per unit; Cocktail's relevance splits a context into runs of different weight).
// Every item starts at its cheapest choice (choice 0); the upgrade with the largest (weighted bound reduction /
// extra bytes) is applied while the byte capacity holds (greedy on a heap, O(items · log items)).
// Invariant: a feasible result never spends more than `capacity` bytes; when even the cheapest
// choices do not fit, the result is infeasible and says by how much.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

namespace chorus {

inline constexpr size_t kComixMaxChoices = 4;  // e.g. tq2, tq3, tq4, q8 (the policy's tiers)

struct ComixItem {
  double weight = 1;                             // readers × relevance (a context read by k agents: k)
  size_t blocks = 0;                             // blocks still to be sealed with this item's choice
  std::array<double, kComixMaxChoices> err{};    // error estimate per choice (non-increasing is not required)
  std::array<size_t, kComixMaxChoices> bytes{};  // real bytes of one block side per choice (metadata included)
  size_t choices = 3;                            // the first `choices` entries are used (1..kComixMaxChoices)
};

struct ComixAllocation {
  std::vector<int> choice;  // (items) index into the item's choices
  bool feasible = false;
  size_t bytes = 0;         // Σ blocks · bytes[choice]
  size_t cheapest = 0;      // Σ blocks · bytes[0]
  double weighted_err = 0;  // Σ weight · err[choice]
};

ComixAllocation AllocateComix(const std::vector<ComixItem>& items, size_t capacity);

}  // namespace chorus
