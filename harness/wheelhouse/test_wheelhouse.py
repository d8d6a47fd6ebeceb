"""Wheelhouse tests that need neither the network nor a GPU (fake wheels, tiny parts)."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from harness.wheelhouse import repack, sitepaths, stages, transfer
from harness.wheelhouse.install import check_transfers, unpack
from harness.wheelhouse.manifest import MANIFEST_NAME, FileEntry, Manifest, WheelEntry
from harness.wheelhouse.parts import JoinedReader, PartWriter, sha256_file
from harness.wheelhouse.pins import Pin, read_pins


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fake_wheel(path: Path, files: dict[str, bytes]) -> Path:
    dist_info = path.name.split("-")[0] + "-1.0.dist-info"
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in files.items())
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{dist_info}/RECORD", record + f"{dist_info}/RECORD,,\n")
    return path


def _manifest(parts: list[FileEntry], bootstrap: WheelEntry, wheels: list[WheelEntry], budget: int) -> Manifest:
    return Manifest(python="3.12", zstd_level=3, zstd_window_log=27, transfer_budget=budget,
                    bootstrap=bootstrap, archive=FileEntry("a", 0, ""), parts=parts, wheels=wheels,
                    stages=stages.plan(parts, bootstrap, budget))


def test_shipped_pins_are_exact_and_include_the_bootstrap():
    pins = read_pins()
    assert "zstandard" in {pin.key for pin in pins}
    assert all(pin.version and pin.why for pin in pins)


@pytest.mark.parametrize("line", ["torch>=2.0  # range", "torch==2.11.0\ntorch==2.11.0  # twice"])
def test_pins_reject_ranges_and_duplicates(tmp_path, line):
    path = tmp_path / "pins.txt"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=r"pins.txt:\d"):
        read_pins(path)


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


def test_plan_fills_the_gaps_next_to_full_parts():
    mib = stages.MIB
    parts = [FileEntry(f"p.{i}", size, "") for i, size in enumerate([57 * mib, 57 * mib, 1 * mib], 1)]
    boot = WheelEntry("zstandard.whl", 2 * mib, "", "zstandard==0.25.0", "")
    plan = stages.plan(parts, boot, 60 * mib)
    assert [stage.files for stage in plan] == [
        [MANIFEST_NAME, "p.1", "zstandard.whl"], ["p.2", "p.3"]]
    with pytest.raises(ValueError, match="smaller --part-mb"):
        stages.plan(parts, boot, 40 * mib)


def test_store_drops_sglang_kernel_files_for_other_gpus(tmp_path):
    src = _fake_wheel(tmp_path / "sglang_kernel-0.4.5-cp310-abi3-x.whl", {
        "sgl_kernel/flash_ops.abi3.so": b"fa3" * 100,
        "sgl_kernel/sm90/common_ops.abi3.so": b"hopper",
        "sgl_kernel/sm100/common_ops.abi3.so": b"blackwell",
        "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": b"infllm",
    })
    stored, note = repack.rezip(Pin("sglang-kernel", "0.4.5", ""), src, tmp_path / "out")
    assert "sm100" in note
    with zipfile.ZipFile(stored) as wheel:
        names = wheel.namelist()
        record = wheel.read("sglang_kernel-1.0.dist-info/RECORD").decode()
        assert {info.compress_type for info in wheel.infolist()} == {zipfile.ZIP_STORED}
        assert wheel.read("sgl_kernel/flash_ops.abi3.so") == b"fa3" * 100
    assert "sgl_kernel/sm90/common_ops.abi3.so" in names
    assert not any("sm100" in name or "infllm" in name for name in names + record.splitlines())


def test_check_transfers_names_missing_and_damaged_parts_with_their_stage(tmp_path):
    mib = stages.MIB
    (tmp_path / "p.1").write_bytes(b"good")
    (tmp_path / "p.2").write_bytes(b"bad!")
    parts = [FileEntry("p.1", 4, _sha(b"good")), FileEntry("p.2", 4, _sha(b"good")),
             FileEntry("p.3", 49 * mib, "")]
    boot = WheelEntry("zstandard.whl", 1, "", "zstandard==0.25.0", "")
    manifest = _manifest(parts, boot, [], 50 * mib)
    with pytest.raises(RuntimeError) as error:
        check_transfers(manifest, tmp_path)
    message = str(error.value)
    assert "p.1" not in message
    assert "p.2: corrupt" in message
    stage_of = {file: stage.stage for stage in manifest.stages for file in stage.files}
    assert stage_of["p.3"] != stage_of["p.2"]
    assert f"p.3: missing; it travels in stage {stage_of['p.3']}" in message
    assert f"zstandard.whl: missing; it travels in stage {stage_of['zstandard.whl']}" in message


def test_unpack_round_trip_and_rerun(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    from harness.wheelhouse import build

    wheels = [_fake_wheel(tmp_path / f"pkg{i}-1.0-py3-none-any.whl", {f"pkg{i}/__init__.py": os.urandom(30_000)})
              for i in range(3)]
    out = tmp_path / "out"
    out.mkdir()
    writer = build._compress(wheels, out, part_bytes=20_000, level=3, window_log=27)
    entries = [WheelEntry(w.name, w.stat().st_size, sha256_file(w), f"pkg=={i}", "") for i, w in enumerate(wheels)]
    parts = [FileEntry(part.path.name, part.size, part.sha256) for part in writer.parts]
    boot = WheelEntry("zstandard.whl", 1, "", "zstandard==0.25.0", "")
    manifest = _manifest(parts, boot, entries, 60 * stages.MIB)
    work = tmp_path / "work"
    work.mkdir()
    assert unpack(manifest, out, work, zstandard) == 3
    assert all(sha256_file(work / w.name) == sha256_file(w) for w in wheels)
    (work / wheels[1].name).write_bytes(b"truncated")
    assert unpack(manifest, out, work, zstandard) == 1
    assert unpack(manifest, out, work, zstandard) == 0


def test_pth_files_become_pythonpath_entries(tmp_path):
    extra = tmp_path / "pkg_dir"
    extra.mkdir()
    (tmp_path / "x.pth").write_text(f"import sys; sys.path.insert(0, {str(extra)!r})\n")
    paths = sitepaths.pth_paths(tmp_path)
    assert paths == [str(tmp_path), str(extra)]
    assert sitepaths.export_line(paths).startswith(f"export PYTHONPATH={tmp_path}:{extra}$")


def test_copy_stage_leaves_only_that_stage_in_the_carry_folder(tmp_path):
    mib = stages.MIB
    parts_dir, carry = tmp_path / "parts", tmp_path / "carry"
    parts_dir.mkdir()
    parts = [FileEntry("p.1", 50 * mib, ""), FileEntry("p.2", 50 * mib, "")]
    boot = WheelEntry("zstandard.whl", 1, "", "zstandard==0.25.0", "")
    manifest = _manifest(parts, boot, [], 60 * mib)
    for name in ["p.1", "p.2", "zstandard.whl", MANIFEST_NAME]:
        (parts_dir / name).write_bytes(name.encode())
    transfer.copy_stage(manifest, parts_dir, 1, carry)
    transfer.copy_stage(manifest, parts_dir, 2, carry)
    assert sorted(path.name for path in carry.iterdir()) == ["p.2"]
    assert "install" in transfer.runner_command(manifest, 2, "carry")
    assert "install" not in transfer.runner_command(manifest, 1, "carry")
