// CHORUS_CHECK: internal invariants only (never for outside input — that gets a Status).
#pragma once
#include <cstdio>
#include <cstdlib>

#define CHORUS_CHECK(cond)                                                   \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                   \
      std::abort();                                                          \
    }                                                                        \
  } while (0)
