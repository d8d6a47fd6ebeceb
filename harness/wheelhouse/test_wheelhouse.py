"""Wheelhouse tests that need neither the network nor a GPU (fake wheels, tiny parts)."""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

import pytest

from harness.wheelhouse import received, repack, sitepaths, stages, transfer, verify
from harness.wheelhouse.install import install, unpack
from harness.wheelhouse.manifest import MANIFEST_NAME, FileEntry, Manifest, WheelEntry
from harness.wheelhouse.parts import JoinedReader, PartWriter, sha256_file
from harness.wheelhouse.pins import Pin, read_pins, read_release, releases

pytestmark = pytest.mark.release_independent

MIB = stages.MIB
RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fake_wheel(path: Path, files: dict[str, bytes]) -> Path:
    """A minimal wheel pip installs: the files plus METADATA, WHEEL and RECORD."""
    name, version = path.name.split("-")[:2]
    dist_info = f"{name}-{version}.dist-info"
    files = {**files,
             f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{file},,{len(data)}\n" for file, data in files.items())
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for file, data in files.items():
            wheel.writestr(file, data)
        wheel.writestr(f"{dist_info}/RECORD", record + f"{dist_info}/RECORD,,\n")
    return path


def _manifest(parts: list[FileEntry], bootstrap: WheelEntry, wheels: list[WheelEntry], budget: int,
              archive: FileEntry = FileEntry("a", 0, "")) -> Manifest:
    return Manifest(sglang="0.5.23", python=RUNNING_PYTHON, zstd_level=3, zstd_window_log=27,
                    transfer_budget=budget, bootstrap=bootstrap, archive=archive, parts=parts, wheels=wheels,
                    stages=stages.plan([*parts, bootstrap], budget))


def _write_pins(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


# --- pins -------------------------------------------------------------------------------

@pytest.mark.parametrize("release", releases())
def test_every_release_pins_itself_exactly_with_a_reason_and_the_bootstrap(release):
    pins = read_release(release)
    assert {"zstandard", "sglang"} <= {pin.key for pin in pins}
    assert all(pin.version and pin.why for pin in pins)


def test_releases_sort_numerically_so_the_default_is_the_newest(tmp_path):
    folder = _write_pins(tmp_path / "pins", {"sglang-0.5.9.txt": "sglang==0.5.9\n",
                                             "sglang-0.5.17.txt": "sglang==0.5.17\n", "shared.txt": "x==1\n"})
    assert releases(folder) == ["0.5.9", "0.5.17"]
    with pytest.raises(ValueError, match="known releases: 0.5.9, 0.5.17"):
        read_release("0.5.99", folder)


def test_a_release_file_must_pin_its_own_sglang(tmp_path):
    folder = _write_pins(tmp_path / "pins", {"sglang-0.5.23.txt": "sglang==0.5.22  # typo\n"})
    with pytest.raises(ValueError, match=r"must pin sglang==0.5.23, pins \['0.5.22'\]"):
        read_release("0.5.23", folder)


def test_shared_lines_are_included_and_cannot_be_overridden(tmp_path):
    folder = _write_pins(tmp_path / "pins", {"shared.txt": "# both\nzstandard==0.25.0  # boot\n",
                                             "sglang-0.5.23.txt": "-r shared.txt\nsglang==0.5.23  # it\n"})
    assert [str(pin) for pin in read_release("0.5.23", folder)] == ["zstandard==0.25.0", "sglang==0.5.23"]
    (folder / "sglang-0.5.23.txt").write_text("-r shared.txt\nsglang==0.5.23\nZstandard==0.24.0\n")
    with pytest.raises(ValueError, match=r"sglang-0.5.23.txt:3: Zstandard is already pinned at .*shared.txt:2"):
        read_release("0.5.23", folder)


@pytest.mark.parametrize("text, message", [
    ("torch>=2.0  # range", r"pins.txt:1: expected 'name==version"),
    ("torch==2.11.0\ntorch==2.11.0  # twice", r"pins.txt:2: torch is already pinned at .*pins.txt:1"),
    ("-r missing.txt", r"pins.txt: includes missing.txt, which does not exist"),
    ("-r pins.txt", r"included from itself"),
])
def test_pins_reject_ranges_duplicates_and_bad_includes(tmp_path, text, message):
    path = tmp_path / "pins.txt"
    path.write_text(text + "\n")
    with pytest.raises(ValueError, match=message):
        read_pins(path)


# --- parts and stages -----------------------------------------------------------------------

def test_parts_split_and_join_back(tmp_path):
    data = os.urandom(250_000)
    with PartWriter(tmp_path, "x.tar.zst", 100_000) as writer:
        for start in range(0, len(data), 7_000):
            writer.write(data[start:start + 7_000])
    assert [part.size for part in writer.parts] == [100_000, 100_000, 50_000]
    assert writer.sha256 == _sha(data)
    assert all(part.sha256 == sha256_file(part.path) for part in writer.parts)
    with JoinedReader([part.path for part in writer.parts]) as reader:
        assert reader.read(3) + reader.read(150_000) + reader.read() == data


def test_a_full_part_fills_a_stage_next_to_the_manifest_and_small_files_share_one():
    full = stages.part_bytes(60 * MIB)
    assert full == 59 * MIB
    parts = [FileEntry("p.1", full, ""), FileEntry("p.2", full, ""), FileEntry("p.3", 1 * MIB, "")]
    boot = FileEntry("zstandard.whl", 2 * MIB, "")
    assert [stage.files for stage in stages.plan([*parts, boot], 60 * MIB)] == [
        ["p.1"], ["p.2"], ["p.3", "zstandard.whl"]]
    with pytest.raises(ValueError, match="p.1 .* does not fit a 40 MiB transfer"):
        stages.plan(parts, 40 * MIB)


def test_every_stage_carries_the_manifest_and_nothing_of_another_stage(tmp_path):
    parts_dir, carry = tmp_path / "parts", tmp_path / "carry"
    parts_dir.mkdir()
    part1, part2, boot = "wheelhouse.tar.zst.001", "wheelhouse.tar.zst.002", "zstandard-0.25.0-x.whl"
    manifest = _manifest([FileEntry(part1, 50 * MIB, ""), FileEntry(part2, 50 * MIB, "")],
                         WheelEntry(boot, 1, "", "zstandard==0.25.0", ""), [], 60 * MIB)
    for name in [part1, part2, boot, MANIFEST_NAME]:
        (parts_dir / name).write_bytes(name.encode())
    carry.mkdir()
    (carry / "wheelhouse.tar.zst.021").write_bytes(b"an older build's part")
    (carry / "keep.txt").write_text("not ours")
    for number in (1, 2):
        transfer.copy_stage(manifest, parts_dir, number, carry)
        assert MANIFEST_NAME in {path.name for path in carry.iterdir()}
    assert sorted(path.name for path in carry.iterdir()) == sorted(["keep.txt", MANIFEST_NAME, part2])
    assert "install" in transfer.runner_command(manifest, 2, "carry")
    assert "install" not in transfer.runner_command(manifest, 1, "carry")
    assert all(len(transfer.runner_command(manifest, n, "out/carry/wheelhouse")) <= 2000 for n in (1, 2))


def test_a_stage_and_the_working_tree_must_fit_one_call():
    transfer.check_call_size(60 * MIB, 4 * MIB, 3)
    transfer.check_call_size(63 * MIB, None, 3)  # outside git: nothing to add
    with pytest.raises(ValueError, match=r"stage 3: 60.0 MiB \+ the working tree's 4.5 MiB is over the 64 MiB"):
        transfer.check_call_size(60 * MIB, int(4.5 * MIB), 3)


# --- slimming -------------------------------------------------------------------------------

def test_rezip_stores_uncompressed_and_drops_what_hopper_never_loads(tmp_path):
    src = _fake_wheel(tmp_path / "triton-3.8.0-cp312-x.whl", {
        "triton/_C/libtriton.so": b"core" * 100,
        "triton/_C/libproton.so": b"profiler",
        "triton/backends/nvidia/bin/ptxas": b"hopper ptxas",
        "triton/backends/nvidia/bin/ptxas-blackwell": b"blackwell ptxas",
        "triton/backends/nvidia/lib/cupti/libcupti.so.13": b"cupti",
        "triton/backends/nvidia/lib/cupti-blackwell/libcupti.so.13": b"cupti",
        "triton/instrumentation/libGPUInstrumentationTestLib.so": b"test",
    })
    stored, note = repack.rezip(Pin("triton", "3.8.0", ""), src, tmp_path / "out")
    assert "dropped triton/backends/nvidia/bin/ptxas-blackwell" in note
    with zipfile.ZipFile(stored) as wheel:
        names = wheel.namelist()
        record = wheel.read("triton-3.8.0.dist-info/RECORD").decode()
        assert {info.compress_type for info in wheel.infolist()} == {zipfile.ZIP_STORED}
        assert wheel.read("triton/_C/libtriton.so") == b"core" * 100
    assert {"triton/_C/libtriton.so", "triton/backends/nvidia/bin/ptxas"} <= set(names)
    assert not any(word in line for word in ("proton", "blackwell", "cupti", "TestLib")
                   for line in names + record.splitlines())


def test_rezip_refuses_a_rule_that_no_longer_matches(tmp_path):
    src = _fake_wheel(tmp_path / "sglang_kernel-0.4.10-cp310-x.whl", {
        "sgl_kernel/sm90/common_ops.abi3.so": b"hopper",
        "sgl_kernel/sm100/common_ops.abi3.so": b"blackwell",  # but no infllm_ops*.so
    })
    with pytest.raises(RuntimeError, match=r"\['sgl_kernel/infllm_ops\*.so'\] matched nothing"):
        repack.rezip(Pin("sglang-kernel", "0.4.10", ""), src, tmp_path / "out")


# --- on the runner: what arrived, install, environment -----------------------------------------

def _parts_on_disk(parts_dir: Path, payloads: dict[str, bytes], budget: int) -> Manifest:
    parts_dir.mkdir(exist_ok=True)
    for name, data in payloads.items():
        (parts_dir / name).write_bytes(data)
    entries = [FileEntry(name, len(data), _sha(data)) for name, data in payloads.items() if name != "boot.whl"]
    boot = payloads["boot.whl"]
    manifest = _manifest(entries, WheelEntry("boot.whl", len(boot), _sha(boot), "zstandard==0.25.0", ""), [], budget)
    manifest.write(parts_dir)
    return manifest


def test_status_names_the_stages_still_to_send_and_a_damaged_copy(tmp_path):
    parts_dir = tmp_path / "parts"
    payloads = {"p.1": b"one", "p.2": b"two", "p.3": b"333", "boot.whl": b"zz"}
    manifest = _parts_on_disk(parts_dir, payloads, budget=stages.MANIFEST_RESERVE + 3)
    stage_of = {file: stage.stage for stage in manifest.stages for file in stage.files}
    assert received.status_line(received.check(manifest, parts_dir), parts_dir).endswith("ready to install")

    (parts_dir / "p.2").unlink()  # a runner lost and started afresh lacks earlier stages
    (parts_dir / "p.3").write_bytes(b"3x3")  # same size, other bytes, new mtime: re-hashed
    arrived = received.check(manifest, parts_dir)
    assert arrived.stages_to_send == sorted([stage_of["p.2"], stage_of["p.3"]])
    line = received.status_line(arrived, parts_dir)
    assert f"still to send: {received.ranges(arrived.stages_to_send)}" in line
    assert "p.3 corrupt" in line
    report = received.problem_report(arrived, parts_dir)
    assert f"p.2: missing; it travels in stage {stage_of['p.2']}" in report
    assert "p.1" not in report and "boot.whl" not in report


def test_ranges_folds_consecutive_stages():
    assert received.ranges([7, 1, 2, 3, 5, 6]) == "1-3, 5-7"
    assert received.ranges([]) == ""


def test_environment_has_the_pth_folders_and_the_carried_nvidia_libraries(tmp_path):
    extra = tmp_path / "pkg_dir"
    extra.mkdir()
    (tmp_path / "x.pth").write_text(f"import sys; sys.path.insert(0, {str(extra)!r})\n")
    (tmp_path / "nvidia" / "nccl" / "lib").mkdir(parents=True)
    env = sitepaths.environment(tmp_path)
    assert env == {"PYTHONPATH": [str(tmp_path), str(extra)],
                   "LD_LIBRARY_PATH": [str(tmp_path / "nvidia" / "nccl" / "lib")]}
    lines = sitepaths.export_lines(env)
    assert lines[0].startswith(f"export PYTHONPATH={tmp_path}:{extra}$")
    assert lines[1] == f"export LD_LIBRARY_PATH={tmp_path}/nvidia/nccl/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
    child = sitepaths.child_env(env)
    assert child["PYTHONPATH"] == f"{tmp_path}{os.pathsep}{extra}"


def test_unpack_round_trip_and_rerun(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    from harness.wheelhouse import build

    wheels = [_fake_wheel(tmp_path / f"pkg{i}-1.0-py3-none-any.whl", {f"pkg{i}/__init__.py": os.urandom(30_000)})
              for i in range(3)]
    out = tmp_path / "out"
    out.mkdir()
    writer = build.compress(wheels, out, part_bytes=20_000, level=3, window_log=27)
    entries = [WheelEntry(w.name, w.stat().st_size, sha256_file(w), f"pkg=={i}", "") for i, w in enumerate(wheels)]
    parts = [FileEntry(part.path.name, part.size, part.sha256) for part in writer.parts]
    manifest = _manifest(parts, WheelEntry("zstandard.whl", 1, "", "zstandard==0.25.0", ""), entries, 60 * MIB)
    work = tmp_path / "work"
    work.mkdir()
    assert unpack(manifest, out, work, zstandard) == 3
    assert all(sha256_file(work / w.name) == sha256_file(w) for w in wheels)
    (work / wheels[1].name).write_bytes(b"truncated")
    assert unpack(manifest, out, work, zstandard) == 1
    assert unpack(manifest, out, work, zstandard) == 0


def test_install_waits_for_every_stage_then_installs_and_verifies(tmp_path, monkeypatch):
    """The whole runner side on tiny wheels: resume after a lost part, pip --target, env file, verify."""
    pytest.importorskip("zstandard")
    from harness.wheelhouse import build

    boot_src = Path(sys.modules["zstandard"].__file__).parent
    boot = tmp_path / "parts" / "zstandard-0.25.0-x.whl"
    boot.parent.mkdir()
    with zipfile.ZipFile(boot, "w") as wheel:  # install unzips zstandard/ from it and imports that
        for file in boot_src.rglob("*"):
            if file.is_file() and "__pycache__" not in file.parts:
                wheel.write(file, f"zstandard/{file.relative_to(boot_src)}")
    wheels = [_fake_wheel(tmp_path / "tinypkg-1.0-py3-none-any.whl", {"tinypkg/__init__.py": b"X = 1\n"}),
              _fake_wheel(tmp_path / "tinylib-2.0-py3-none-any.whl", {"nvidia/tinylib/lib/libtiny.so": b"\0"})]
    writer = build.compress(wheels, boot.parent, part_bytes=600, level=3, window_log=27)
    parts = [FileEntry(part.path.name, part.size, part.sha256) for part in writer.parts]
    entries = [WheelEntry(w.name, w.stat().st_size, sha256_file(w), "==".join(w.name.split("-")[:2]), "")
               for w in wheels]
    manifest = _manifest(parts, WheelEntry(boot.name, boot.stat().st_size, sha256_file(boot), "zstandard==0.25.0", ""),
                         entries, stages.MANIFEST_RESERVE + max(boot.stat().st_size, 600),
                         FileEntry(build.ARCHIVE_NAME, writer.size, writer.sha256))
    manifest.write(boot.parent)
    target = tmp_path / "site"

    stage_of = {file: stage.stage for stage in manifest.stages for file in stage.files}
    second = (boot.parent / parts[1].file).read_bytes()
    (boot.parent / parts[1].file).unlink()
    with pytest.raises(RuntimeError, match=rf"{parts[1].file}: missing; it travels in stage {stage_of[parts[1].file]}"):
        install(boot.parent, target, tmp_path / "work", force=False)
    assert not target.exists()

    (boot.parent / parts[1].file).write_bytes(second)
    text = install(boot.parent, target, tmp_path / "work", force=False)
    assert (target / "tinypkg" / "__init__.py").read_bytes() == b"X = 1\n"
    assert list((target / "tinypkg" / "__pycache__").glob("__init__.*.pyc")), "install compiles the bytecode"
    env_file = (target / sitepaths.ENV_FILE).read_text()
    assert f"export LD_LIBRARY_PATH={target}/nvidia/tinylib/lib$" in env_file
    assert "already installed" in install(boot.parent, target, tmp_path / "work", force=False)
    assert "2 wheels" in text

    monkeypatch.setattr(verify, "SMOKE_IMPORTS", ["tinypkg"])
    monkeypatch.setattr(verify, "VERSIONS", ["tinypkg"])
    ok, report = verify.verify(target)
    assert ok, report
    assert "carried: all 2 distributions found in the target at their pinned versions" in report
    outside = tmp_path / "outside"
    (outside / "outsider").mkdir(parents=True)
    (outside / "outsider" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(outside))  # verify judges the target alone, not the caller's path
    monkeypatch.setattr(verify, "SMOKE_IMPORTS", ["tinypkg", "outsider"])
    ok, report = verify.verify(target)
    assert not ok and "No module named 'outsider'" in report
    monkeypatch.setattr(verify, "SMOKE_IMPORTS", ["tinypkg"])
    (target / "tinypkg-1.0.dist-info").rename(target / "tinypkg-1.1.dist-info")
    (target / "tinypkg-1.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.1\n")
    ok, report = verify.verify(target)
    assert not ok and "tinypkg==1.0  WRONG VERSION 1.1" in report
