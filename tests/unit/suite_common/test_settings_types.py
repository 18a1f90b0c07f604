"""The settings types every service shares: lists and CIDR lists read one way, renamed settings kept readable."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from suite_common.settings import CidrList, ServiceSettings, StringList, deprecated_names_in_use, renamed


class _Example(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="EXAMPLE_", extra="ignore", populate_by_name=True)

    names: StringList = Field(default_factory=list)
    networks: CidrList = Field(default_factory=list, validation_alias=renamed("EXAMPLE_NETWORKS", "EXAMPLE_NETS"))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("a, b ,,c", ["a", "b", "c"]), ('["a", "b"]', ["a", "b"]), ("", []), (" ", [])],
)
def test_a_list_is_read_from_json_or_comma_separated(
    raw: str, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXAMPLE_NAMES", raw)
    assert _Example().names == expected


def test_networks_are_checked_and_a_bad_one_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXAMPLE_NETWORKS", "10.1.0.0/16, fd00:1::/64")
    assert _Example().networks == ["10.1.0.0/16", "fd00:1::/64"]

    monkeypatch.setenv("EXAMPLE_NETWORKS", "10.1.0.0/16, 10.0.0.0/40")
    with pytest.raises(pydantic.ValidationError, match=r"'10\.0\.0\.0/40' is not a network in CIDR notation"):
        _Example()


def test_a_former_name_is_still_read_and_reported_as_deprecated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXAMPLE_NETS", "10.1.0.0/16")

    assert _Example().networks == ["10.1.0.0/16"]
    assert deprecated_names_in_use(_Example) == [("EXAMPLE_NETS", "EXAMPLE_NETWORKS")]
    assert deprecated_names_in_use(_Example, {"EXAMPLE_NETWORKS": "10.1.0.0/16"}) == []


def test_a_renamed_field_is_still_given_by_its_name_in_code() -> None:
    assert _Example(networks=["10.2.0.0/16"]).networks == ["10.2.0.0/16"]
