"""A case file's bytes -> plain Python data, refusing what YAML would accept without a word.

PyYAML's safe loader lets a repeated key silently replace the earlier one, decodes whatever
bytes it is given (or fails with a traceback), and reads a file of any size. A case file is a
few KiB of hand-written UTF-8 text, so this reader checks the size and the encoding before
parsing, refuses a second document and every duplicated key (naming the key, both lines and
the case it sits in), and turns each YAML error into one line with its position. Anchors,
aliases and ``<<`` merges stay allowed: they are how a file shares fields on purpose.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 1 << 20
"""The shipped case files are about 1 KiB each; a megabyte is a generated or a wrong file,
and refusing it before parsing keeps a stray binary or log from being read whole."""

# Longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
FOREIGN_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32 LE"), (codecs.BOM_UTF32_BE, "UTF-32 BE"),
    (codecs.BOM_UTF16_LE, "UTF-16 LE"), (codecs.BOM_UTF16_BE, "UTF-16 BE"),
)
MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass
class YamlProblem(Exception):
    """What is wrong, and where: the case (label) and the field, when the problem sits in one."""

    message: str
    case: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        return self.message


def _line_and_column(data: bytes | str, offset: int) -> tuple[int, int]:
    newline = b"\n" if isinstance(data, bytes) else "\n"
    line_start = data.rfind(newline, 0, offset) + 1
    return data.count(newline, 0, offset) + 1, offset - line_start + 1


def decode(data: bytes) -> str:
    """UTF-8 text (a leading UTF-8 byte-order mark is allowed, as YAML allows it), or a problem."""
    for bom, name in FOREIGN_BOMS:
        if data.startswith(bom):
            raise YamlProblem(f"the file is {name} text (it starts with the byte-order mark "
                              f"{bom.hex(' ').upper()}); case files are UTF-8: save it as UTF-8")
    if b"\0" in data:
        offset = data.index(b"\0")
        utf16 = data[1::2].count(0) > len(data) // 4 or data[0::2].count(0) > len(data) // 4
        hint = "UTF-16 text without a byte-order mark (save it as UTF-8)" if utf16 else "not a YAML text file"
        raise YamlProblem(f"binary data: a NUL byte at offset {offset}; {hint}")
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line, column = _line_and_column(data, err.start)
        raise YamlProblem(f"not UTF-8: byte 0x{data[err.start]:02X} at line {line}, column {column} "
                          "(Latin-1 or Windows-1252 text?); save the file as UTF-8") from None
    if "\ufeff" in text:
        line, column = _line_and_column(text, text.index("\ufeff"))
        raise YamlProblem(f"a byte-order mark (U+FEFF) inside the file at line {line}, column {column} "
                          "(two files pasted together?); delete it")
    return text


def read_bytes(path: Path) -> bytes:
    """The file's bytes, refusing a folder, an unreadable file and one over MAX_FILE_BYTES."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError:
        raise YamlProblem("is a folder, not a case file") from None
    except OSError as err:
        raise YamlProblem(f"cannot be read: {err.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise YamlProblem(f"larger than {MAX_FILE_BYTES >> 20} MiB; case files are a few KiB of "
                          "hand-written YAML (a generated or wrong file?)")
    return data


def _mark(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "an unknown position"


def _yaml_problem(err: yaml.YAMLError, text: str) -> YamlProblem:
    """One line for any PyYAML error (their str() spans several lines)."""
    if isinstance(err, yaml.reader.ReaderError):
        line, column = _line_and_column(text, err.position)
        return YamlProblem(f"control character U+{err.character:04X} at line {line}, column {column}; "
                           "YAML allows tabs, line breaks and printable text only")
    problem = " ".join(str(getattr(err, "problem", None) or err).split())
    if isinstance(err, yaml.composer.ComposerError) and "another document" in problem:
        return YamlProblem(f"a second YAML document starts at {_mark(err.problem_mark)}; "
                           "a case file is one document (drop the '---' or split the file)")
    if isinstance(err, yaml.constructor.ConstructorError):
        return YamlProblem(f"{problem} at {_mark(err.problem_mark)}; case files hold plain "
                           "mappings, lists, numbers and text")
    return YamlProblem(f"YAML syntax error at {_mark(getattr(err, 'problem_mark', None))}: {problem}")


def _where(path: list, document: yaml.MappingNode) -> tuple[str | None, str | None]:
    """(case label, dotted field) for a key path such as ['cases', 2, 'sweep', 'dtype']."""
    if len(path) >= 2 and path[0] == "cases" and isinstance(path[1], int):
        case_node = _child(_child(document, "cases"), path[1])
        name = _child(case_node, "name")
        label = f"case #{path[1] + 1} ('{name.value if isinstance(name, yaml.ScalarNode) else '?'}')"
        rest = path[2:]
    else:
        label = "defaults" if len(path) >= 2 and path[0] == "defaults" else None
        rest = path[1:] if label else path
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest).lstrip(".")
    return label, field or None


def _child(node, key):
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
        return node.value[key]
    if isinstance(node, yaml.MappingNode):
        return next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
    return None


def refuse_duplicate_keys(document: yaml.Node) -> None:
    """Raise on the first key a mapping repeats (YAML would keep only the last value).

    Walks the composed node graph once per node: aliases point at nodes already seen, so
    a file of nested aliases ("billion laughs") costs no more than its text.
    """
    seen_nodes: set[int] = set()
    pending: list[tuple[yaml.Node, list]] = [(document, [])]
    while pending:
        node, path = pending.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending += [(item, [*path, index]) for index, item in enumerate(node.value)]
        if not isinstance(node, yaml.MappingNode):
            continue
        first_line: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if key.tag == MERGE_TAG or not isinstance(key, yaml.ScalarNode):
                continue
            line = key.start_mark.line + 1
            if (key.tag, key.value) in first_line:
                case, field = _where([*path, key.value], document)
                raise YamlProblem(f"appears twice (lines {first_line[key.tag, key.value]} and {line}); "
                                  "YAML would silently keep only the last value: keep one",
                                  case=case, field=field)
            first_line[key.tag, key.value] = line
            pending.append((value, [*path, key.value]))


def load(path: Path) -> Any:
    """The one YAML document in ``path`` as Python data (None for an empty file)."""
    text = decode(read_bytes(path))
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader checks every character here
        document = loader.get_single_node()
        if document is None:
            return None
        refuse_duplicate_keys(document)
        return loader.construct_document(document)
    except yaml.YAMLError as err:
        raise _yaml_problem(err, text) from None
    except RecursionError:
        raise YamlProblem("nested too deeply for a case file (brackets or indentation hundreds of "
                          "levels deep)") from None
    finally:
        if loader is not None:
            loader.dispose()
