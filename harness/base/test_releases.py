"""Which contracts apply to which sglang: the support policy of harness/base/releases.py."""

from __future__ import annotations

import pytest

from harness.base import releases


@pytest.fixture
def installed_as(monkeypatch):
    def install(version):
        monkeypatch.setattr(releases, "installed_version", lambda dist: version)
        releases.installed.cache_clear()
        return releases.installed()

    yield install
    releases.installed.cache_clear()


@pytest.mark.parametrize("version, contracts, note", [
    ("0.5.17", "0.5.17", None),
    ("0.5.20", "0.5.20", None),
    ("0.5.23", "0.5.23", None),
    ("0.5.17.post1", "0.5.17", None),
    ("0.5.31", "0.5.23", "newer than the newest known release"),
    ("0.5.24.dev12+g1a2b3c", "0.5.23", "source checkout or pre-release"),
])
def test_contracts_follow_the_installed_release(installed_as, version, contracts, note):
    found = installed_as(version)
    assert found.contracts == contracts
    assert (found.note is None) if note is None else (note in found.note and contracts in found.note)


@pytest.mark.parametrize("version, message", [
    ("0.5.16", "older than 0.5.17"),
    (None, "sglang is not installed"),
    ("nightly", "not a release number"),
])
def test_unsupported_installs_get_one_clear_error(installed_as, version, message):
    with pytest.raises(releases.UnsupportedVersionError, match=message):
        installed_as(version)


def test_since_picks_the_newest_entry_at_or_below_the_release():
    contract = releases.since({"0.5.17": "old", "0.5.21": "new"})
    assert [contract.at(r) for r in ("0.5.17", "0.5.20", "0.5.21", "0.5.23")] == ["old", "old", "new", "new"]


@pytest.mark.parametrize("table", [{"0.5.21": 1}, {"0.5.17": 1, "0.6.0": 2}])
def test_since_refuses_tables_that_leave_releases_uncovered(table):
    with pytest.raises(ValueError, match="known releases"):
        releases.since(table)
