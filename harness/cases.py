"""Case matrices: YAML files under cases/ -> validated, immutable Case values.

A file names one forward mode, shared ``defaults``, and a list of ``cases``. A case may carry
``sweep`` (field -> list, expanded as a cartesian product) and ``variants`` (a list of override
maps, each a separate case). Nothing is guessed: a value of the wrong type is refused rather
than coerced ("3" is not 3), a repeated key is refused rather than overwritten, an empty
selection is refused rather than running nothing, names are restricted to what is safe in test
ids and paths, and sizes must be ones a backend and a machine can serve (harness/case_limits.py).
Every problem is one ``CaseFileError`` line naming the file, the case and the field, and saying
what would be valid.
"""

from __future__ import annotations

import difflib
import itertools
import re
import reprlib
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from harness import ROOT, case_limits, case_yaml
from harness.backends import BACKENDS
from harness.modes import MODES
from harness.runners import RUNNER_NAMES

# The names a case may use, all in one place. Modes, runner forms and backends come from their
# registries; the others are vocabularies of the fixtures (pools, layouts, padding).
Mode = Literal[tuple(MODES)]
Dtype = Literal["float32", "float16", "bfloat16"]
KvLayout = Literal["shuffled", "contiguous", "interleaved", "non_monotonic"]
HostMirrors = Literal["full", "gpu_only", "none"]
Runner = Literal[RUNNER_NAMES]
PadStyle = Literal["prod_fill", "small_real"]
BackendName = Literal[tuple(BACKENDS)]

CASES_DIR = ROOT / "cases"

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,47}")
NAME_RULE = ("use 1 to 48 letters, digits, '-' or '_', starting with a letter or digit "
             "(names become test ids, -k selectors and parts of report file names)")
SHOW = reprlib.Repr()  # short reprs for messages (keyword arguments need Python 3.12)
SHOW.maxstring, SHOW.maxother, SHOW.maxlist, SHOW.maxdict, SHOW.maxlevel = 40, 40, 4, 4, 1


class CaseFileError(ValueError):
    """A case file that cannot be used; the message is meant for a human, not a traceback."""


def _problem(field: str, message: str) -> PydanticCustomError:
    """A cross-field problem, carried through pydantic with the field it belongs to."""
    return PydanticCustomError("case_field", "{message}", {"field": field, "message": message})


class CaseSpec(BaseModel):
    """One fully expanded case. Field docs are the schema users read; sizes are case_limits'."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(description="short id, unique in its file")
    bs: int = Field(description="real requests in the batch")
    prefix_lens: list[int] = Field(description="committed KV tokens per request (len == bs)")
    input_lens: list[int] | None = Field(
        default=None,
        description="new query tokens per request: the verify window (target_verify) or the "
        "draft-extend window (draft_extend_v2); an int is repeated bs times; unused by draft_decode",
    )
    topk: int = 1
    num_steps: int = Field(default=3, description="EAGLE draft steps")
    page_size: int = 1
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
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
    context_len: int = Field(
        default=0, description="the model's context length: backends size their buffers from it, and each "
        "req_to_token row gets sglang's speculative headroom on top; a prefix is at most what a request has "
        "committed when a speculative step runs (case_limits.max_committed_prefix: context_len - 5 + the most "
        "tokens one step commits, - 4 + before sglang 0.5.22); 0 = 4096, doubled until the longest prefix is at most context_len - 4 "
        "(never just fits the case)")
    draft_window: int = Field(
        default=0,
        description="draft decode only: --speculative-draft-window-size (0 = off); the draft attends "
        "draft_sink prefix tokens + the most recent draft_window, then its own branch")
    draft_sink: int = Field(default=0, description="draft decode only: --speculative-draft-sink-size")
    sliding_window: int = Field(
        default=0,
        description="the model's sliding window, as its HF config names it (0 = full attention): a query "
        "at position p attends keys at positions k with p - k < sliding_window; sglang's layer gets "
        "sliding_window - 1, as Gemma 2's get_attention_sliding_window_size gives it")
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _expand_scalars(cls, data: Any) -> Any:
        """``prefix_lens: 9`` means 9 for every request (only for a bs worth expanding)."""
        bs = data.get("bs") if isinstance(data, dict) else None
        if not _is_int(bs):
            return data  # validation reports the bad bs
        too_many = case_limits.FIELD_RANGES["bs"].problem(bs)
        if too_many:  # before expanding: a typo in bs must not build a billion-entry list
            raise _problem("bs", too_many)
        repeated = {key: [data[key]] * bs for key in ("prefix_lens", "input_lens") if _is_int(data.get(key))}
        return {**data, **repeated}

    @model_validator(mode="after")
    def _consistent(self) -> "CaseSpec":
        problem = case_limits.field_problem(self) or self._inconsistency()
        if problem:
            raise _problem(*problem)
        return self

    def _inconsistency(self) -> tuple[str, str] | None:
        for field in ("prefix_lens", "input_lens"):
            lengths = getattr(self, field)
            if lengths is not None and len(lengths) != self.bs:
                return field, (f"has {len(lengths)} entries but bs is {self.bs} "
                               "(one per request, or one number for all)")
        window = case_limits.sliding_window_problem(self)
        if window:
            return "sliding_window", window
        if self.num_heads % self.num_kv_heads:
            return "num_heads", f"{self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}"
        if any(size < self.bs for size in self.capture_bs):
            return "capture_bs", (f"{self.capture_bs} must each be >= bs {self.bs} "
                                  "(a graph pads the batch up to its size)")
        for field in SELECTIONS:
            chosen = getattr(self, field)
            repeated = next((item for index, item in enumerate(chosen) if item in chosen[:index]), None)
            if repeated is not None:
                return field, f"lists {repeated!r} twice (its cells would run twice under one id)"
            if not chosen and field != "capture_bs":
                return field, (f"is empty, so the case would make no cells; name at least one of "
                               f"{', '.join(_choices(field))}, or leave {field} out for all")
        return None

    @property
    def capture_sizes(self) -> list[int]:
        return self.capture_bs or [self.bs, 2 * self.bs, 4 * self.bs]


SELECTIONS = ("backends", "runners", "pad_styles", "capture_bs")  # lists a case picks cells from
SWEEPABLE = tuple(field for field in CaseSpec.model_fields if field != "name")
ENTRY_KEYS = (*CaseSpec.model_fields, "sweep", "variants")  # what a case entry may hold


def _choices(field: str) -> tuple[str, ...]:
    """The names a list field may hold, read from its Literal (list[Literal[...]])."""
    return get_args(get_args(CaseSpec.model_fields[field].annotation)[0])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    model_config = ConfigDict(extra="forbid", strict=True)

    mode: Mode
    defaults: dict[Any, Any] = {}  # keys are checked against the schema, naming the odd one
    cases: list[dict[Any, Any]]


# --- one line per problem --------------------------------------------------------------------

class _Problem(Exception):
    """A problem found in one entry, before the file and case are known to the caller."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def _line(where: str, case: str | None, field: str | None, message: str) -> str:
    parts = [where, case, f"field {field!r}" if field is not None else None, message]
    return ": ".join(part for part in parts if part)


_KINDS = ((bool, "true/false"), (int, "a whole number"), (float, "a decimal number"), (str, "text"),
          (list, "a list"), (dict, "a mapping"), (date, "a date"), (bytes, "binary data"))


def show(value: Any) -> str:
    """A value as the user wrote it, short, with what YAML made of it."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (true/false)"
    if isinstance(value, date):
        return f"{value} (a date)"
    kind = next((name for kind, name in _KINDS if isinstance(value, kind)), type(value).__name__)
    if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+(\.\d*)?\s*", value):
        kind += "; write numbers without quotes"
    return f"{SHOW.repr(value)} ({kind})"


_EXPECTED = {"int_type": "a whole number", "string_type": "text", "list_type": "a list",
             "dict_type": "a mapping of fields"}


def _unknown(key: Any, valid: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(str(key), valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown field{hint}; valid fields: {', '.join(valid)}"


def _describe(error: dict) -> tuple[str, str]:
    """(field, message) for one pydantic error (unknown keys are refused before validation)."""
    if error["type"] == "case_field":
        return error["ctx"]["field"], error["ctx"]["message"]
    loc = error["loc"]
    field = str(loc[0]) if loc else "?"
    item = f"item {loc[1] + 1}: " if len(loc) > 1 and isinstance(loc[1], int) else ""
    kind = error["type"]
    if kind == "missing":
        return field, "required"
    if kind in _EXPECTED:
        return field, f"{item}expected {_EXPECTED[kind]}, got {show(error['input'])}"
    if kind == "literal_error":
        return field, f"{item}got {show(error['input'])}; valid: {error['ctx']['expected']}"
    return field, f"{item}{error['msg']}"


def _validation_line(where: str, case: str | None, error: ValidationError,
                     inherited: set[str] = frozenset()) -> str:
    """The first problem only: later ones are often its echoes (a bad bs leaves lengths unexpanded)."""
    field, message = _describe(error.errors()[0])
    return _line(where, case, field, message + (" (set in defaults)" if field in inherited else ""))


# --- names, sweeps and variants --------------------------------------------------------------

def _check_name(name: Any, field: str) -> str:
    if not isinstance(name, str):
        raise _Problem(field, f"expected text, got {show(name)}")
    if NAME_PATTERN.fullmatch(name):
        return name
    unsafe = next((char for char in name if not re.fullmatch(r"[A-Za-z0-9_-]", char)), None)
    why = (f"{len(name)} characters" if len(name) > 48 else f"{unsafe!r} is not allowed" if unsafe
           else "empty" if not name else "it starts with a punctuation mark")
    raise _Problem(field, f"{SHOW.repr(name)} is not a safe name ({why}): {NAME_RULE}")


def _checked_keys(entry: dict, field: str, valid: tuple[str, ...]) -> None:
    unknown = next((key for key in entry if key not in valid), None)
    if unknown is not None:
        raise _Problem(f"{field}.{unknown}" if field else str(unknown), _unknown(unknown, valid))


def _flat(value: Any) -> bool:
    scalar = (int, float, str, type(None))
    return isinstance(value, scalar) or (isinstance(value, list) and all(isinstance(v, scalar) for v in value))


def _checked_sweep(sweep: Any) -> dict[str, list]:
    if sweep is None:
        return {}
    if not isinstance(sweep, dict):
        raise _Problem("sweep", f"expected a mapping of field -> list of values, got {show(sweep)}")
    if not sweep:
        raise _Problem("sweep", "is empty; sweep at least one field, or leave sweep out")
    if "name" in sweep:
        raise _Problem("sweep.name", "cannot be swept: swept cases are named after the swept values")
    _checked_keys(sweep, "sweep", SWEEPABLE)
    for key, values in sweep.items():
        field = f"sweep.{key}"
        if not isinstance(values, list):
            raise _Problem(field, f"expected a list of values, got {show(values)}")
        if not values:
            raise _Problem(field, "is an empty list, so the sweep makes no cases; give at least one value")
        odd = next((value for value in values if not _flat(value)), None)
        if odd is not None:
            raise _Problem(field, f"{show(odd)}: sweep values are numbers, text or flat lists")
        repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if repeated is not None:
            raise _Problem(field, f"lists {SHOW.repr(repeated)} twice (two cases with one name)")
    return sweep


def _checked_variants(variants: Any) -> list[dict]:
    if variants is None:
        return [{}]
    if not isinstance(variants, list):
        raise _Problem("variants", f"expected a list of field -> value maps, got {show(variants)}")
    if not variants:
        raise _Problem("variants", "is an empty list, so the case makes no cases; give a variant "
                                   "or leave variants out")
    names: dict[str, int] = {}
    for index, variant in enumerate(variants):
        field = f"variants[{index}]"
        if not isinstance(variant, dict):
            raise _Problem(field, f"expected a mapping of field overrides, got {show(variant)}")
        nested = next((key for key in ("sweep", "variants") if key in variant), None)
        if nested:
            raise _Problem(f"{field}.{nested}", "a variant cannot hold a sweep or variants of its own; "
                                                "put the sweep on the case")
        _checked_keys(variant, field, tuple(CaseSpec.model_fields))
        if "name" not in variant:
            if len(variants) > 1:
                raise _Problem(field, "has no name; when a case has several variants each needs a "
                                      "name (it becomes part of the case name)")
            continue
        name = _check_name(variant["name"], f"{field}.name")
        if name in names:
            raise _Problem(f"{field}.name", f"{name!r} is also the name of variants[{names[name]}]")
        names[name] = index
    return variants


def _suffix(key: str, value: Any) -> str:
    text = "x".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"{key.replace('_', '')}{text}"


def _expand(entry: dict, already: int) -> list[tuple[str, dict[str, Any], set[str]]]:
    """One entry (defaults applied) -> (name, fields, keys set by sweep or variant) per case."""
    fields = dict(entry)
    if "name" not in fields:
        raise _Problem("name", "required (every case names itself)")
    base = _check_name(fields["name"], "name")
    sweep = _checked_sweep(fields.pop("sweep", None))
    variants = _checked_variants(fields.pop("variants", None))
    count, factors = case_limits.expansion_factors(sweep, variants)
    too_many = case_limits.count_problem(count, already, factors)
    if too_many:
        raise _Problem("sweep" if sweep else "variants", too_many)
    expanded = []
    for point in itertools.product(*sweep.values()):
        for variant in variants:
            parts = [base, variant.get("name"), *(_suffix(k, v) for k, v in zip(sweep, point))]
            name = "-".join(part for part in parts if part)
            expanded.append((name, {**fields, **dict(zip(sweep, point)), **variant, "name": name},
                             {*sweep, *variant}))
    return expanded


# --- files -----------------------------------------------------------------------------------

def _read_document(path: Path, where: str) -> _CaseFile:
    try:
        document = case_yaml.load(path)
    except case_yaml.YamlProblem as problem:
        raise CaseFileError(_line(where, problem.case, problem.field, problem.message)) from None
    if document is None:
        raise CaseFileError(f"{where}: holds no YAML (empty, or only comments); a case file is a "
                            "mapping with 'mode', 'cases' and optionally 'defaults'")
    if not isinstance(document, dict):
        raise CaseFileError(f"{where}: expected a mapping with 'mode', 'cases' and optionally "
                            f"'defaults', got {show(document)}")
    try:
        _checked_keys(document, "", tuple(_CaseFile.model_fields))
    except _Problem as problem:
        raise CaseFileError(_line(where, None, problem.field, problem.message)) from None
    try:
        parsed = _CaseFile.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        if loc[0] == "cases" and len(loc) > 1:  # an entry that is not a mapping
            raise CaseFileError(_line(where, f"case #{loc[1] + 1}", None,
                                      f"expected a mapping of fields, got {show(first['input'])}")) from None
        raise CaseFileError(_validation_line(where, None, exc)) from None
    if not parsed.cases:
        raise CaseFileError(_line(where, None, "cases", "is an empty list; give at least one case"))
    if "name" in parsed.defaults:
        raise CaseFileError(_line(where, "defaults", "name", "each case names itself; a shared name "
                                                              "would give every case the same id"))
    try:
        _checked_keys(parsed.defaults, "", tuple(key for key in ENTRY_KEYS if key != "name"))
    except _Problem as problem:
        raise CaseFileError(_line(where, "defaults", problem.field, problem.message)) from None
    return parsed


def spec_problem(mode_name: str, spec: CaseSpec) -> tuple[str, str] | None:
    """(field, what is wrong) when a valid spec is no case of its mode or no machine can serve it.

    The rules beyond the schema, shared by the loader and the generated tier's strategy.
    """
    mode = MODES[mode_name]
    problem = mode.validate(spec) or (
        None if mode.takes_draft_window or not (spec.draft_window or spec.draft_sink) else
        f"draft_window: only draft_decode takes draft_window / draft_sink, not {mode_name}")
    return tuple(problem.partition(": ")[::2]) if problem else case_limits.case_problem(mode, spec)


def load_case_file(path: Path) -> list[Case]:
    where = str(path)
    parsed = _read_document(path, where)
    try:
        case_limits.max_cases()
    except ValueError as err:
        raise CaseFileError(f"{where}: {err}") from None
    cases: list[Case] = []
    made_by: dict[str, str] = {}
    for index, raw in enumerate(parsed.cases):
        label = f"case #{index + 1} ({SHOW.repr(raw['name']) if 'name' in raw else 'no name'})"
        try:
            _checked_keys(raw, "", ENTRY_KEYS)
            expanded = _expand({**parsed.defaults, **raw}, already=len(cases))
        except _Problem as problem:
            inherited = re.split(r"[.\[]", problem.field)[0] in parsed.defaults.keys() - raw.keys()
            raise CaseFileError(_line(where, label, problem.field,
                                      problem.message + (" (set in defaults)" if inherited else ""))) from None
        for name, fields, overridden in expanded:
            case = f"case '{name}'"
            inherited = parsed.defaults.keys() - raw.keys() - overridden
            try:
                spec = CaseSpec.model_validate(fields)
            except ValidationError as exc:
                raise CaseFileError(_validation_line(where, case, exc, inherited)) from None
            found = spec_problem(parsed.mode, spec)
            if found:
                raise CaseFileError(_line(where, case, *found))
            if name in made_by:
                raise CaseFileError(_line(where, case, "name",
                                          f"duplicate case name (also made by {made_by[name]})"))
            made_by[name] = label
            cases.append(Case(mode=parsed.mode, spec=spec, source=where))
    return cases


def load_all_cases(directory: Path = CASES_DIR) -> list[Case]:
    if not directory.is_dir():
        raise CaseFileError(f"{directory}: not a folder (the cases folder holds *.yaml case files)")
    files = sorted(directory.glob("*.yaml"))
    if not files:
        others = sorted(path.name for path in directory.glob("*.yml"))
        hint = f" ({', '.join(others)}: rename to .yaml)" if others else ""
        raise CaseFileError(f"{directory}: no *.yaml case files found{hint}")
    cases: list[Case] = []
    sources: dict[str, str] = {}
    for path in files:
        for case in load_case_file(path):
            if case.case_id in sources:
                raise CaseFileError(_line(case.source, f"case '{case.spec.name}'", "name",
                                          f"its id {case.case_id} is also made by {sources[case.case_id]}; "
                                          "ids must be unique across files"))
            sources[case.case_id] = case.source
            cases.append(case)
    return cases
