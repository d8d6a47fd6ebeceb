"""Per-dtype tolerances: the one place these numbers live.

An element mismatches when |out - ref| > atol + rtol * |ref|; any mismatch or
NaN fails the cell. fp32 allows for tf32 matmuls in GPU kernels (Triton's
default fp32 dot on Hopper: 2.7e-3 max abs error measured on an H200); the seed bugs this harness hunts produce errors of
order 0.1-1, far above every bound here.
"""

TOLERANCES = {
    "float32": {"atol": 5e-3, "rtol": 5e-3},
    "float16": {"atol": 5e-3, "rtol": 5e-3},
    "bfloat16": {"atol": 3e-2, "rtol": 3e-2},
}

# The key-census head (harness/key_census.py: q = 0, so its output is the mean of V over the
# attended set). A correct kernel errs only by rounding: rtol is one output ulp (bf16 2^-7;
# fp16 two ulps, 2^-9, for split-KV merges of fp16 partial outputs); atol covers fp32
# accumulation and partial outputs of magnitude <= 0.25 stored in bf16 (2^-10) or fp16 (2^-12)
# before the merge; fp32 allows for tf32 rounding of V in GPU dots (2^-11 relative, 2^-9 with
# margin). One wrong key among n moves some element by about 3.5 / n: 0.0136 at n = 257, at
# least 6.9 times the bf16 bound over 200 draws of unit-normal V (head_dim 64); detection holds
# to about 2000 attended keys in bf16 and 1000 in fp32.
CENSUS_TOLERANCES = {
    "float32": {"atol": 2**-9, "rtol": 2**-10},
    "float16": {"atol": 2**-12, "rtol": 2**-9},
    "bfloat16": {"atol": 2**-10, "rtol": 2**-7},
}
