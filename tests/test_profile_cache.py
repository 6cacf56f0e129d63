"""The packaged profile's parsed copy (decodecalc/profiles/<gpu>.json, tools/update_profile_cache.py): current, read
only when it matches its YAML, and exactly the YAML's mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from decodecalc.errors import ConfigError
from decodecalc.timemodel import profile_sources as prof_mod
from decodecalc.yamlio import safe_load

PROFILES = Path(prof_mod.__file__).resolve().parents[1] / "profiles"


@pytest.mark.parametrize("yaml_path", sorted(PROFILES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_packaged_profile_has_a_current_parsed_copy(yaml_path):
    text = yaml_path.read_text()
    copy = yaml_path.with_suffix(".json")
    assert copy.is_file(), f"{copy.name} is missing: run python -m tools.update_profile_cache"
    assert copy.read_text() == prof_mod.parsed_copy(text, safe_load(text)), \
        f"{copy.name} does not match {yaml_path.name}: run python -m tools.update_profile_cache"


def test_the_copy_reads_back_as_the_yaml_mapping_integer_keys_included():
    text = (PROFILES / "h200.yaml").read_text()
    data = safe_load(text)
    assert any(isinstance(k, int) for f in data["families"].values() for k in (f.get("occupancy_by_head_dim") or {}))
    assert prof_mod._packaged_mapping("h200") == data
    assert prof_mod._read_copy(prof_mod.parsed_copy(text, data))["data"] == data


def _folder(tmp_path: Path, yaml_text: str, copy_text: str | None) -> Path:
    (tmp_path / "g.yaml").write_text(yaml_text)
    if copy_text is not None:
        (tmp_path / "g.json").write_text(copy_text)
    return tmp_path


def test_a_copy_of_other_yaml_text_is_ignored(tmp_path):
    stale = prof_mod.parsed_copy("a: 1\n", {"a": 1})
    folder = _folder(tmp_path, "a: 2\n", stale)
    assert prof_mod._packaged_mapping("g", folder) == {"a": 2}


def test_a_matching_copy_is_what_is_read(tmp_path):
    # the copy is read, not the YAML: a copy that matches the text's hash but holds other data proves which one
    text = "a: 2\n"
    forged = prof_mod.parsed_copy(text, {"a": 3})
    assert prof_mod._packaged_mapping("g", _folder(tmp_path, text, forged)) == {"a": 3}


def test_a_broken_copy_falls_back_to_the_yaml(tmp_path):
    assert prof_mod._packaged_mapping("g", _folder(tmp_path, "a: 2\n", "{not json")) == {"a": 2}
    assert prof_mod._packaged_mapping("g", _folder(tmp_path, "a: 2\n", None)) == {"a": 2}
    assert prof_mod._packaged_mapping("missing", tmp_path) is None


def test_data_json_cannot_hold_exactly_is_refused():
    with pytest.raises(ConfigError, match="round trip"):
        prof_mod.parsed_copy("x", {1.5: 1})
