"""Exact paired tests for the result summaries (no scipy needed): the two-sided sign test and the
two-sided Wilcoxon signed-rank test (zeros dropped, midranks for ties, the exact distribution of
W+ over all 2^n sign vectors, by dynamic programming over doubled ranks: O(n^3) at worst, a
second for n = 300).

Checked against known values in __main__: `python3 scripts/paired_tests.py`.
"""
import math


def sign_p(a, b):
    """Two-sided exact sign test: a cases one way, b the other."""
    n = a + b
    if n == 0: return 1.0
    k = min(a, b)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def wilcoxon_p(d):
    """Two-sided exact Wilcoxon signed-rank p of differences d, and W+ (the sum of positive ranks)."""
    d = [x for x in d if x != 0]
    n = len(d)
    if n == 0: return 1.0, 0.0
    order = sorted(range(n), key=lambda i: abs(d[i]))
    r2 = [0] * n  # 2 x rank (midranks become integers)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(d[order[j + 1]]) == abs(d[order[i]]): j += 1
        for k in range(i, j + 1): r2[order[k]] = i + j + 2
        i = j + 1
    w_plus = sum(r2[i] for i in range(n) if d[i] > 0)
    total = sum(r2)
    dist = [0] * (total + 1)  # sign vectors giving each doubled W+
    dist[0] = 1
    top = 0
    for r in r2:
        for s in range(top, -1, -1):
            if dist[s]: dist[s + r] += dist[s]
        top += r
    lo = min(w_plus, total - w_plus)
    p = sum(dist[: lo + 1]) / 2**n
    return min(1.0, 2 * p), w_plus / 2


if __name__ == "__main__":
    # n = 8, all one way: p = 2/256; d = 1..10 with 3 and 7 negative: W- = 10, P(W <= 10) = 43/1024.
    assert abs(wilcoxon_p([1] * 8)[0] - 2 / 256) < 1e-12
    assert abs(wilcoxon_p([1, 2, -3, 4, 5, 6, -7, 8, 9, 10])[0] - 86 / 1024) < 1e-12, wilcoxon_p([1, 2, -3, 4, 5, 6, -7, 8, 9, 10])
    assert abs(sign_p(0, 8) - 2 / 256) < 1e-12 and sign_p(4, 4) == 1.0
    print("paired_tests: ok")
