"""Key census: one query head drawn as zero, whose output is the plain mean of V over what it attends.

With q = 0 every score is 0, so the softmax weights are exactly uniform
(exp(0) = 1: no rounding of P anywhere) and the head's output is the mean of V
over the attended set. Attending one wrong key among n moves some element of
that mean by |V_a - V_b| / n (about 3.5 / n over 64 dimensions of unit-normal
V; a missing or extra key moves it by about as much), while a correct kernel
errs only by rounding the mean to the output dtype. Compared at
CENSUS_TOLERANCES (harness/tolerances.py) one wrong key is unmistakable where
the ordinary tolerance lets it through: on an H200 a bf16 replay that attended
one wrong key of 257 passed with error 0.018 against a tolerance of 0.03.

The census costs no extra forward: it is the last query head of every draw
(reading the last KV head; a wrong slot is wrong in every KV head), and the
other heads keep random scores. A model with one head has no census head.
"""

from __future__ import annotations


def census_heads(num_heads: int) -> list[int]:
    return [num_heads - 1] if num_heads > 1 else []
