"""Case matrices: YAML files under cases/ -> validated, immutable Case values.

A file names one forward mode, shared ``defaults``, and a list of ``cases``. A
case may carry ``sweep`` (field -> list, expanded as a cartesian product) and
``variants`` (a list of override maps, each a separate case). Every problem is
reported as one ``CaseFileError`` naming the file, the case and the field.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.backends import BACKENDS
from harness.runners import RUNNER_NAMES
from harness.modes import MODES

# Names come from their registries; the schema never keeps its own list.
Mode = Literal[tuple(MODES)]
Dtype = Literal["float32", "float16", "bfloat16"]
KvLayout = Literal["shuffled", "contiguous", "interleaved", "non_monotonic"]
HostMirrors = Literal["full", "gpu_only", "none"]
Runner = Literal[RUNNER_NAMES]
PadStyle = Literal["prod_fill", "small_real"]
BackendName = Literal[tuple(BACKENDS)]

CASES_DIR = Path(__file__).resolve().parent.parent / "cases"


class CaseFileError(ValueError):
    """A case file that cannot be used; the message is meant for a human, not a traceback."""


class CaseSpec(BaseModel):
    """One fully expanded case. Field docs are the schema users read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="short id, unique in its file")
    bs: int = Field(ge=1, le=256, description="real requests in the batch")
    prefix_lens: list[int] = Field(description="committed KV tokens per request (len == bs)")
    input_lens: list[int] | None = Field(
        default=None,
        description="new query tokens per request: the verify window (target_verify) or the "
        "draft-extend window (draft_extend_v2); an int is repeated bs times; unused by draft_decode",
    )
    topk: int = Field(default=1, ge=1, le=8)
    num_steps: int = Field(default=3, ge=1, le=16, description="EAGLE draft steps")
    page_size: int = Field(default=1, ge=1, le=128)
    num_heads: int = Field(default=4, ge=1)
    num_kv_heads: int = Field(default=2, ge=1)
    head_dim: int = Field(default=64, ge=16, le=256)
    dtype: Dtype = "float32"
    kv_layout: KvLayout = "shuffled"
    host_mirrors: HostMirrors = Field(
        default="full",
        description="full: CPU mirrors as the scheduler passes them; gpu_only: the GPU-only "
        "path's Nones, exactly as production passes them; none: every *_cpu / seq_lens_sum None",
    )
    runners: list[Runner] = list(RUNNER_NAMES)
    pad_styles: list[PadStyle] = ["prod_fill", "small_real"]
    capture_bs: list[int] = Field(
        default=[],
        description="CUDA-graph capture batch sizes; empty means 1x, 2x and 4x bs",
    )
    backends: list[BackendName] = list(BACKENDS)
    context_len: int = Field(default=0, ge=0, description="model context length; 0 = derived")
    draft_window: int = Field(
        default=0, ge=0,
        description="draft decode only: --speculative-draft-window-size (0 = off); the draft attends "
        "draft_sink prefix tokens + the most recent draft_window, then its own branch")
    draft_sink: int = Field(default=0, ge=0, description="draft decode only: --speculative-draft-sink-size")
    seed: int = 0

    @field_validator("prefix_lens")
    @classmethod
    def _non_negative(cls, value: list[int]) -> list[int]:
        if any(n < 0 for n in value):
            raise ValueError(f"lengths must be >= 0, got {value}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _expand_scalars(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("bs"), int):
            return data  # field validation reports the bad bs
        repeated = {key: [data[key]] * data["bs"] for key in ("prefix_lens", "input_lens")
                    if isinstance(data.get(key), int)}
        return {**data, **repeated}

    @model_validator(mode="after")
    def _consistent(self) -> "CaseSpec":
        if len(self.prefix_lens) != self.bs:
            raise ValueError(f"prefix_lens: has {len(self.prefix_lens)} entries but bs is {self.bs}")
        if self.input_lens is not None:
            if len(self.input_lens) != self.bs:
                raise ValueError(f"input_lens: has {len(self.input_lens)} entries but bs is {self.bs}")
            if any(n < 1 for n in self.input_lens):
                raise ValueError(f"input_lens: must be >= 1, got {self.input_lens}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads: {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if any(c < self.bs for c in self.capture_bs):
            raise ValueError(f"capture_bs: {self.capture_bs} must each be >= bs {self.bs}")
        return self

    @property
    def capture_sizes(self) -> list[int]:
        return self.capture_bs or [self.bs, 2 * self.bs, 4 * self.bs]


@dataclass(frozen=True)
class Case:
    """A case bound to its mode and source file (so errors and reports can name them)."""

    mode: Mode
    spec: CaseSpec
    source: str

    @property
    def case_id(self) -> str:
        return f"{self.mode}-{self.spec.name}"


class _CaseFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Mode
    defaults: dict[str, Any] = {}
    cases: list[dict[str, Any]]


def _format_validation(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if not field:  # a cross-field check names its field as "field: message"
        field, _, message = message.partition(": ")
    if first["type"] == "extra_forbidden":
        message = f"unknown field; valid fields: {', '.join(sorted(CaseSpec.model_fields))}"
    extra = f" (and {len(error.errors()) - 1} more)" if len(error.errors()) > 1 else ""
    return f"field '{field}': {message}{extra}"


def _suffix(key: str, value: Any) -> str:
    text = "x".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"{key.replace('_', '')}{text}"


def _expand(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """One raw entry -> (name, fields) per sweep point and variant."""
    raw = dict(raw)
    sweep = raw.pop("sweep", {}) or {}
    variants = raw.pop("variants", [{}]) or [{}]
    if not isinstance(sweep, dict) or not all(isinstance(v, list) for v in sweep.values()):
        raise ValueError("field 'sweep': must map field names to lists of values")
    if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
        raise ValueError("field 'variants': must be a list of field -> value maps")
    base_name = str(raw.get("name", ""))
    keys = list(sweep)
    expanded = []
    for point in itertools.product(*(sweep[k] for k in keys)):
        for variant in variants:
            fields = {**raw, **dict(zip(keys, point)), **variant}
            parts = [base_name, *(_suffix(k, v) for k, v in zip(keys, point))]
            if "name" in variant:
                parts = [base_name, str(variant["name"]), *parts[1:]]
            expanded.append(("-".join(p for p in parts if p), fields))
    return expanded


def load_case_file(path: Path) -> list[Case]:
    where = str(path)
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise CaseFileError(f"{where}: YAML syntax error{at}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(document, dict):
        raise CaseFileError(f"{where}: expected a mapping with 'mode', 'defaults' and 'cases'")
    try:
        parsed = _CaseFile.model_validate(document)
    except ValidationError as exc:
        raise CaseFileError(f"{where}: {_format_validation(exc)}") from None

    cases: list[Case] = []
    seen: set[str] = set()
    for index, raw in enumerate(parsed.cases):
        label = f"case #{index + 1} ('{raw.get('name', '?')}')"
        if "name" not in raw:
            raise CaseFileError(f"{where}: {label}: field 'name': required")
        try:
            expanded = _expand({**parsed.defaults, **raw})
        except ValueError as exc:
            raise CaseFileError(f"{where}: {label}: {exc}") from None
        for name, fields in expanded:
            try:
                spec = CaseSpec.model_validate({**fields, "name": name})
            except ValidationError as exc:
                raise CaseFileError(f"{where}: case '{name}': {_format_validation(exc)}") from None
            mode = MODES[parsed.mode]
            problem = mode.validate(spec) or (
                None if mode.takes_draft_window or not (spec.draft_window or spec.draft_sink) else
                f"draft_window: only draft_decode takes draft_window / draft_sink, not {parsed.mode}")
            if problem:
                field, _, message = problem.partition(": ")
                raise CaseFileError(f"{where}: case '{name}': field '{field}': {message}")
            if name in seen:
                raise CaseFileError(f"{where}: case '{name}': field 'name': duplicate case name")
            seen.add(name)
            cases.append(Case(mode=parsed.mode, spec=spec, source=where))
    return cases


def load_all_cases(directory: Path = CASES_DIR) -> list[Case]:
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise CaseFileError(f"{directory}: no *.yaml case files found")
    return [case for path in files for case in load_case_file(path)]
