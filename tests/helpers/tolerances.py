"""Tolerances in one place (the tests import them from here)."""

# Tolerances in one place: bounds on rounding error, named by the precision and the depth of the computation.
# Statistical bounds computed from sample sizes are not tolerances: they stay beside their tests.
ATOL64 = 1e-9  # float64 through a circuit, an enumeration or autograd (sums over many terms)
RTOL64 = 1e-9  # float64, relative: values far from 1 (log-probabilities, gradients of long sums)
ATOL64_FEW_OPS = 1e-12  # float64 results a few operations deep (a closed form, one table, one softmax)
RTOL64_FEW_OPS = 1e-12  # the same, relative
ATOL32 = 1e-4  # float32 sums over many terms in different orders (compiled or GPU against eager float64)
ATOL32_FEW_OPS = 1e-5  # float32 (or bfloat16 inputs computed in float32) a few operations deep
RTOL32 = 1e-5  # float32, relative
ATOL32_BOARD = 1e-3  # float32 log-probabilities summed over a Sudoku board's cells and groups (~100 terms of ~10)
P_VALUE_MIN = 1e-6  # significance level of the chi-square tests of samplers: a correct one fails 1 run in 1e6
