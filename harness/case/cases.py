"""Case matrices: YAML files under cases/ -> validated, immutable Case values.

A file names one forward mode, shared ``defaults``, and a list of ``cases``. A case may carry
``sweep`` (field -> list, expanded as a cartesian product) and ``variants`` (a list of override
maps, each a separate case). Nothing is guessed: a value of the wrong type is refused rather
than coerced ("3" is not 3), a repeated key is refused rather than overwritten, an empty
selection is refused rather than running nothing, names are restricted to what is safe in test
ids and paths, and sizes must be ones a backend and a machine can serve (harness/case/case_limits.py).
Every problem is one ``CaseFileError`` line naming the file, the case and the field, and saying
what would be valid.

The case itself is a value below every registry (harness/base/case_spec.py CaseSpec); this loader sits
above them and holds what a file may say: CaseFields, the schema users read (the value's fields,
``bs`` the file states, the registries' names), and the rules a case must meet.
"""

from __future__ import annotations

import difflib
import itertools
import re
import reprlib
from datetime import date
from pathlib import Path
from typing import Any, Literal, Mapping, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from harness import ROOT
from harness.case import case_limits, case_yaml
from harness.families import BACKENDS, FAMILIES
from harness.fixtures.kernel_paths import KERNEL_PATHS
from harness.base.case_spec import Case, CaseSpec
from harness.modes import MODES
from harness.runners import RUNNER_NAMES

# The names a case may pick from the registries; the fixtures' vocabularies are the value's.
Mode = Literal[tuple(MODES)]
Runner = Literal[RUNNER_NAMES]
BackendName = Literal[tuple(BACKENDS)]
REGISTRY_FIELDS = {"runners": (Runner, RUNNER_NAMES), "backends": (BackendName, tuple(BACKENDS))}

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


class _CaseRules(BaseModel):
    """What a case must meet beyond its fields' types: CaseFields' validators (its fields are the value's)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

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
    def _consistent(self):
        fields = dict(self)
        problem = case_limits.field_problem(fields) or _inconsistency(fields)
        if problem:
            raise _problem(*problem)
        return self


def _inconsistency(fields: Mapping[str, Any]) -> tuple[str, str] | None:
    bs = fields["bs"]
    for field in ("prefix_lens", "input_lens"):
        lengths = fields[field]
        if lengths is not None and len(lengths) != bs:
            return field, (f"has {len(lengths)} entries but bs is {bs} "
                           "(one per request, or one number for all)")
    window = case_limits.sliding_window_problem(fields)
    if window:
        return "sliding_window", window
    if fields["kernel_path"] and fields["kernel_path"] not in KERNEL_PATHS:
        return "kernel_path", f"{fields['kernel_path']!r} is none of {', '.join(KERNEL_PATHS)} (harness/fixtures/kernel_paths.py)"
    if fields["num_heads"] % fields["num_kv_heads"]:
        return "num_heads", f"{fields['num_heads']} is not a multiple of num_kv_heads {fields['num_kv_heads']}"
    if any(size < bs for size in fields["capture_bs"]):
        return "capture_bs", (f"{fields['capture_bs']} must each be >= bs {bs} "
                              "(a graph pads the batch up to its size)")
    for field in SELECTIONS:
        chosen = fields[field]
        repeated = next((item for index, item in enumerate(chosen) if item in chosen[:index]), None)
        if repeated is not None:
            return field, f"lists {repeated!r} twice (its cells would run twice under one id)"
        if not chosen and field != "capture_bs":
            return field, (f"is empty, so the case would make no cells; name at least one of "
                           f"{', '.join(_choices(field))}, or leave {field} out for all")
    return None


def _as_written(field: str, info: FieldInfo) -> tuple[Any, FieldInfo]:
    """A value field as a file writes it: a registry's names are checked against it, all by default."""
    if field not in REGISTRY_FIELDS:
        return info.annotation, info
    name, names = REGISTRY_FIELDS[field]
    return list[name], Field(default=list(names), description=info.description)


# A value field marked exclude is the harness's own (CaseSpec.first_request): no file states it.
_VALUE_FIELDS = {field: _as_written(field, info) for field, info in CaseSpec.model_fields.items() if not info.exclude}
# The schema users read: the value's fields with the batch size a file states, in the order files write them.
CaseFields = create_model(
    "CaseFields", __base__=_CaseRules, __doc__="One case as a file gives it (harness/base/case_spec.py CaseSpec's fields and bs).",
    name=_VALUE_FIELDS.pop("name"), bs=(int, Field(description="real requests in the batch")), **_VALUE_FIELDS)

SELECTIONS = ("backends", "runners", "pad_styles", "capture_bs")  # lists a case picks cells from
SWEEPABLE = tuple(field for field in CaseFields.model_fields if field not in ("name", "family"))
FILE_FIELDS = ("family",)  # set once per file, never per case
ENTRY_KEYS = (*(f for f in CaseFields.model_fields if f not in FILE_FIELDS), "sweep", "variants")  # what a case entry may hold


def _choices(field: str) -> tuple[str, ...]:
    """The names a list field may hold, read from its Literal (list[Literal[...]])."""
    return get_args(get_args(CaseFields.model_fields[field].annotation)[0])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def spec_from_fields(fields: Mapping[str, Any]) -> CaseSpec:
    """A case's fields as a file gives them -> the value, or pydantic's ValidationError naming the field.

    The schema and the size rules; the mode's rules are spec_problem's.
    """
    return CaseSpec(**{field: value for field, value in CaseFields.model_validate(fields) if field != "bs"})


def fields_of(spec: CaseSpec) -> dict[str, Any]:
    """The value as a case file's fields, in the schema's order (spec_from_fields' inverse)."""
    dump = spec.model_dump()
    return {field: spec.bs if field == "bs" else dump[field] for field in CaseFields.model_fields}


Family = Literal[tuple(FAMILIES)]


class _CaseFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    mode: Mode
    family: Family = "dense"  # the attention family of every case in the file (harness/families)
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
    if key in FILE_FIELDS:
        return f"'{key}' is the file's, set once at its top beside 'mode' (every case of a file is of one family)"
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
        _checked_keys(variant, field, tuple(f for f in CaseFields.model_fields if f != "family"))
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


def _family_problem(mode_name: str, spec: CaseSpec) -> str | None:
    """A mode sglang never runs with the family, a backend of another family, or what the family's
    own rules refuse."""
    family = FAMILIES[spec.family]
    if mode_name in family.unserved_modes:
        return f"family: {family.name} runs no {mode_name}: {family.unserved_modes[mode_name]}"
    strangers = [name for name in spec.backends if name not in family.backends]
    if strangers:
        return (f"backends: {', '.join(strangers)} serve another attention family; the {family.name} family's "
                f"backends are {', '.join(family.backends)}")
    return family.validate(spec)


_DRAFT_WINDOW_MODES = [name for name, mode in MODES.items() if mode.takes_draft_window or mode.compact_draft_cache]


def spec_problem(mode_name: str, spec: CaseSpec) -> tuple[str, str] | None:
    """(field, what is wrong) when a valid spec is no case of its mode or no machine can serve it.

    The rules beyond the schema, shared by the loader and the generated tier's strategy.
    """
    mode = MODES[mode_name]
    problem = _family_problem(mode_name, spec) or mode.validate(spec) or (
        None if mode_name in _DRAFT_WINDOW_MODES or not (spec.draft_window or spec.draft_sink) else
        f"draft_window: only {', '.join(_DRAFT_WINDOW_MODES)} take draft_window / draft_sink, not {mode_name}")
    return tuple(problem.partition(": ")[::2]) if problem else case_limits.case_problem(mode, spec)


def load_case_file(path: Path) -> list[Case]:
    where = str(path)
    parsed = _read_document(path, where)
    try:
        case_limits.max_cases(), case_limits.cell_memory_budget()
    except ValueError as err:
        raise CaseFileError(f"{where}: {err}") from None
    cases: list[Case] = []
    made_by: dict[str, str] = {}
    for index, raw in enumerate(parsed.cases):
        label = f"case #{index + 1} ({SHOW.repr(raw['name']) if 'name' in raw else 'no name'})"
        try:
            _checked_keys(raw, "", ENTRY_KEYS)
            family_fields = dict(family=parsed.family, backends=list(FAMILIES[parsed.family].backends))
            expanded = _expand({**family_fields, **parsed.defaults, **raw}, already=len(cases))
        except _Problem as problem:
            inherited = re.split(r"[.\[]", problem.field)[0] in parsed.defaults.keys() - raw.keys()
            raise CaseFileError(_line(where, label, problem.field,
                                      problem.message + (" (set in defaults)" if inherited else ""))) from None
        for name, fields, overridden in expanded:
            case = f"case '{name}'"
            inherited = parsed.defaults.keys() - raw.keys() - overridden
            try:
                spec = spec_from_fields(fields)
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
    # a family's files under cases/<family>/ (harness/families), dense's at the top
    files = sorted(directory.glob("*.yaml")) + sorted(
        path for family in FAMILIES.values() if family.case_folder
        for path in (directory / family.case_folder).glob("*.yaml"))
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
