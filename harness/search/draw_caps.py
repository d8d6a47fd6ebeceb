"""What a generated cell may be on each kind of machine, and what it may cost.

A draw profile is data: the value ranges drawn and caps on what one cell may cost, each cap
with the reason for its value. Its head shapes are a free grid where nothing compiles (the CPU's
Triton interpreter), and served models' shards on a GPU, where each new kernel configuration is
a compile and production's few shapes are the ones worth running. Which (backend, runner form)
pairs a draw may use is not listed here: it is what BACKENDS and RUNNER_FORMS say runs on this
machine. Memory is counted by the case loader's own estimate (harness/case/case_limits.py BUFFERS);
the work caps bound what the float64 reference and Triton's CPU interpreter do, so a draw never
exhausts the GPU or the 2-core CI machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from harness.base import platform
from harness.families import BACKENDS, FAMILIES
from harness.case.case_limits import BUFFERS, CELL_MEMORY_ENV, largest_cell_sizes
from harness.base.case_spec import CaseSpec
from harness.modes.base import SpecMode
from harness.runners import RUNNER_FORMS
from harness.fixtures.sglang_env import decode_capture_sizes

KV_TILE = 64  # tokens of KV (and of extend queries) one kernel program iteration covers
# sglang's decode max_bs on 80-160 GB GPUs (H100, H200) with tp < 4 (server_args
# _handle_gpu_memory_settings): the largest default capture size there.
DEFAULT_DECODE_MAX_BS = 256


@dataclass(frozen=True)
class Cap:
    limit: int
    reason: str


@dataclass(frozen=True)
class ModelShape:
    """A served model's attention as one GPU runs it: its tensor-parallel shard's heads, its head size
    and the windows its layers attend with.

    The kernels compile per dtype, head_dim, head counts (FlashInfer and FA4 per GQA group), page size
    and, in Triton's extend kernel, the window; drawn from models, cells share kernels as a server's
    batches do, where a free product of head counts made almost every cell a compile of its own.
    """

    name: str  # the model and its tensor-parallel degree
    num_heads: int  # query heads per GPU
    num_kv_heads: int
    head_dim: int
    sliding_windows: tuple[int, ...] = (0,)  # its layers' windows as its HF config names them; 0: full attention


@dataclass(frozen=True)
class HeadGrid:
    """Head shapes as a free product, every kv_heads x GQA ratio x head_dim: for a machine that compiles
    nothing (Triton's CPU interpreter), where a new shape costs no compile and small ones keep a cell short."""

    kv_heads: tuple[int, ...]
    gqa_ratios: tuple[int, ...]
    head_dims: tuple[int, ...]


@dataclass(frozen=True)
class FamilyShard:
    """A served model of another attention family (harness/families) as one GPU runs it: the case
    fields that say so (the family's model and one GPU's heads), named for humans. A draw on one of
    that family's backends takes one of these instead of the dense head shapes."""

    name: str
    family: str
    fields: tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class DrawProfile:
    name: str
    dtypes: tuple[tuple[str, int], ...]  # (dtype, weight: how often beside the others); first: where draws shrink to
    heads: HeadGrid | tuple[ModelShape, ...]
    page_sizes: tuple[int, ...]
    context_lens: tuple[int, ...]
    max_topk: int
    max_steps: int
    max_window: Cap
    max_bs: Cap
    max_capture_bs: Cap
    max_pool_bytes: Cap
    max_attention_macs: Cap
    max_reference_query_bytes: Cap
    max_kernel_tiles: Cap
    family_shards: tuple[FamilyShard, ...] = ()  # the other families' served shapes; a family without any is not drawn
    # a case's longest prefix is one of these or the context wall (case_strategy._prefix_limit)
    prefix_scales: tuple[int, ...] = (3, 64, 512, 4096)
    # where set, a case's longest prefix times its batch size stays within this many tokens: large batches
    # take short rows and long rows come in small batches, so few draws break max_pool_bytes and are redrawn
    max_batch_tokens: int | None = None

    def shards_of(self, family: str) -> tuple[FamilyShard, ...]:
        return tuple(shard for shard in self.family_shards if shard.family == family)

    @property
    def capture_sizes(self) -> list[int]:
        """sglang's default capture sizes this profile can afford to pad to."""
        return [c for c in decode_capture_sizes(DEFAULT_DECODE_MAX_BS) if c <= self.max_capture_bs.limit]


@lru_cache(maxsize=1)
def machine_runs() -> tuple[tuple[str, str], ...]:
    """(backend, runner form) pairs this machine runs, per the registries; eager forms first."""
    runs = [(name, runner) for runner, form in RUNNER_FORMS.items() for name, entry in BACKENDS.items()
            if not (entry.needs_gpu and not platform.HAS_GPU) and form.skip_reason(entry) is None]
    return tuple(sorted(runs, key=lambda run: RUNNER_FORMS[run[1]].graph))


@dataclass(frozen=True)
class CellCost:
    pool_bytes: int  # the case loader's memory estimate of the cell
    attention_macs: int  # multiply-adds of the attention (the reference, and the interpreter's work)
    reference_query_bytes: int  # the reference's float64 K/V of one query, GQA-expanded
    kernel_tiles: int  # (query tile x KV tile x head) iterations of the attention kernels, all forms

    def over(self, profile: DrawProfile) -> str | None:
        """The first cap this cost breaks, as a sentence; None when within every cap."""
        for name, value in vars(self).items():
            cap: Cap = getattr(profile, f"max_{name}")
            if value > cap.limit:
                return f"{name} {value} > {cap.limit} ({cap.reason})"
        return None


def cell_cost(mode: SpecMode, spec: CaseSpec, graph: bool) -> CellCost:
    """Upper bounds of one cell's memory and work (a graph form also runs the batch eagerly)."""
    row_lens = mode.row_lens(spec)
    sizes = largest_cell_sizes(mode, spec)
    queries = mode.query_tokens(spec)
    qk_head_dim = FAMILIES[spec.family].shape(spec).qk_head_dim  # MLA: the latent and the rope key
    macs = 2 * spec.num_heads * qk_head_dim * sum(w * row for w, row in zip(queries, row_lens))
    # Decode kernels run one program per query; extend kernels one per tile of a request's queries.
    decode = mode.forward_mode == "DECODE"
    tiles = sum((w if decode else -(-w // KV_TILE)) * -(-row // KV_TILE) for w, row in zip(queries, row_lens))
    return CellCost(pool_bytes=sum(buffer.size(sizes) for buffer in BUFFERS), attention_macs=macs,
                    reference_query_bytes=16 * max(row_lens) * spec.num_heads * qk_head_dim,
                    kernel_tiles=(2 if graph else 1) * spec.num_heads * tiles)


GIB, MIB = 1 << 30, 1 << 20

# Per-GPU shards of models sglang serves (HF config.json: num_attention_heads and num_key_value_heads
# over the tensor-parallel degree, head_dim, sliding_window and which layers use it): GQA groups 1 to 8,
# head dims 64 to 256, and the windows production runs.
SERVED_MODELS = (
    ModelShape("Llama-3.1-8B, TP1", 32, 8, 128),
    ModelShape("Llama-3.1-70B, TP8", 8, 1, 128),  # one KV head per GPU
    ModelShape("Llama-3.2-1B, TP1", 32, 8, 64),
    ModelShape("Llama-2-7B, TP4", 8, 8, 128),  # MHA: a group of one
    ModelShape("Qwen2.5-7B, TP1", 28, 4, 128),  # a group of 7
    ModelShape("Qwen3-32B, TP4", 16, 2, 128),
    ModelShape("Mistral-7B-v0.1, TP1", 32, 8, 128, (4096,)),  # every layer windowed
    ModelShape("Gemma-2-9B, TP1", 16, 8, 256, (0, 4096)),  # global and local layers alternate
    ModelShape("Gemma-3-27B, TP2", 16, 8, 128, (0, 1024)),  # one global layer in six
    ModelShape("gpt-oss-20b, TP1", 64, 8, 64, (0, 128)),  # full and banded layers alternate
    # the smallest shards: the only rows whose long contexts fit the reference cap, so the 32K and 128K
    # context walls are drawn (a request's row costs 16 x num_heads x head_dim bytes of reference)
    ModelShape("Llama-3.1-8B, TP8", 4, 1, 128),
    ModelShape("Llama-3.2-1B, TP8", 4, 1, 64),
)

def _mla(name: str, model: str, num_heads: int) -> FamilyShard:
    return FamilyShard(name, "mla", (("model", model), ("num_heads", num_heads)))


# MLA models as one GPU runs them (harness/families/mla/models.py): TP8 puts 1/8 of the heads on a GPU,
# DP attention all of them; the latent (512) and rope key (64) are every served model's.
SERVED_MLA = (
    _mla("DeepSeek-V3/R1, TP8", "deepseek-v3", 16),
    _mla("DeepSeek-V3/R1, DP attention", "deepseek-v3", 128),
    _mla("Kimi-K2, TP8", "kimi-k2", 8),
    _mla("Kimi-K2, DP attention", "kimi-k2", 64),
    _mla("DeepSeek-V2-Lite, TP1", "deepseek-v2-lite", 16),
)

CPU = DrawProfile(
    name="cpu",
    dtypes=(("float32", 1),),  # bf16 is broken in Triton's CPU interpreter (triton-lang/triton#11584)
    heads=HeadGrid(kv_heads=(1, 2), gqa_ratios=(1, 4, 8), head_dims=(64, 128, 256)),
    page_sizes=(1, 16, 64),
    context_lens=(2048, 4096),
    max_topk=8,
    max_steps=7,
    max_window=Cap(16, "the interpreter runs one program per query block: long windows cost seconds each"),
    max_bs=Cap(12, "2 shared cores under the Triton interpreter: a cell must take seconds; 12 "
               "covers sglang's capture sizes 1-8, 10, 12 and their neighbours"),
    max_capture_bs=Cap(16, "padded rows run through the interpreter too"),
    max_pool_bytes=Cap(512 * MIB, "24 GiB shared by several agents, 2 pytest workers each"),
    max_attention_macs=Cap(400_000_000, "the float64 reference, about a second on one core"),
    max_reference_query_bytes=Cap(64 * MIB, "the reference expands one query's K/V to float64"),
    max_kernel_tiles=Cap(256, "the Triton interpreter takes 15-40 ms a tile on an idle core "
                         "(4x that on a loaded one): 256 keeps a cell within about 10 s"),
    # the smallest MLA shard: 2 heads of DeepSeek-V2-Lite's 16 (TP8), as the hand cases run on the CPU
    family_shards=(_mla("DeepSeek-V2-Lite, TP8", "deepseek-v2-lite", 2),),
)

GPU = DrawProfile(
    name="gpu",
    # production serves bf16: 3 draws in 4; fp16 and fp32 kernels stay in reach
    dtypes=(("bfloat16", 6), ("float16", 1), ("float32", 1)),
    heads=SERVED_MODELS,
    page_sizes=(1, 16, 64),
    context_lens=(4096, 8192, 32768, 131072),
    max_topk=8,
    max_steps=7,
    max_window=Cap(64, "verify windows of production trees (speculative_num_draft_tokens) stay below 64"),
    max_bs=Cap(DEFAULT_DECODE_MAX_BS + 32, "above sglang's largest default capture size (256 on "
               "H100/H200), where the runner falls back to eager"),
    max_capture_bs=Cap(DEFAULT_DECODE_MAX_BS, "sglang's largest default capture size on H100/H200"),
    max_pool_bytes=Cap(4 * GIB, "the case loader's per-cell budget (harness/case/case_limits.py)"),
    max_attention_macs=Cap(20_000_000_000, "the float64 reference runs on the host: about 10 s on 16 cores"),
    max_reference_query_bytes=Cap(512 * MIB, "the reference expands one query's K/V to float64"),
    max_kernel_tiles=Cap(1 << 40, "compiled kernels: memory and the host reference bound a GPU cell"),
    family_shards=SERVED_MLA,
)

# With SCALE_WORKERS on one H200 (139 GiB): 48 GiB of pools by the loader's estimate, the rest for what it leaves
# out (Triton's eager attention logits, the float64 reference, workspaces): 12 workers ran out of memory in a
# quarter of the cells on 2026-11-28 (peaks of 12-35 GiB against the 6 GiB estimate)
SCALE_CELL_GIB = 6
SCALE_WORKERS = 8

# Production scale on one GPU (`--generated-profile scale`, whose run takes SCALE_CELL_GIB as the loader's
# CELL_MEMORY_ENV budget, with SCALE_WORKERS workers): batches to 1,024 (eager above the largest capture
# size), req_to_token rows of 32K, 128K and 256K tokens, trees to topk 8 and 7 steps, and a batch's KV in the millions of tokens where the
# shard's KV is small (a 1-KV-head shard's token costs 1.25 KiB of pool and copy). Served shapes and
# dtypes, as the GPU profile draws them.
SCALE = DrawProfile(
    name="scale",
    dtypes=(("bfloat16", 6), ("float16", 1)),  # production's; fp32 is the GPU profile's
    heads=SERVED_MODELS,
    page_sizes=GPU.page_sizes,
    context_lens=(32768, 131072, 262144),
    max_topk=8,
    max_steps=7,
    max_window=GPU.max_window,
    max_bs=Cap(1024, "four times sglang's largest default capture size on H100/H200: batches above it run "
               "eagerly, as sglang runs them, up to max_running_requests"),
    max_capture_bs=GPU.max_capture_bs,
    max_pool_bytes=Cap(SCALE_CELL_GIB * GIB, f"{SCALE_WORKERS} workers on one H200 (139 GiB); the case loader "
                       f"takes it as {CELL_MEMORY_ENV} from the profile"),
    max_attention_macs=Cap(2_000_000_000_000, "the float64 reference runs on the GPU, in 256 MiB chunks: "
                           "about a second"),
    max_reference_query_bytes=Cap(4 * GIB, "the reference expands one query's K/V to float64: a 256K row "
                                  "of a shard with 1,024 query values (8 heads of 128, Llama-3.1-70B TP8)"),
    max_kernel_tiles=GPU.max_kernel_tiles,
    family_shards=SERVED_MLA,
    prefix_scales=(64, 512, 2048, 8192, 65536),
    max_batch_tokens=4 << 20,  # millions of KV tokens a batch, within the pool cap for small-KV shards
)

PROFILES = {profile.name: profile for profile in (CPU, GPU, SCALE)}
