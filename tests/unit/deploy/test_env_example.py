""".env.example: every setting of every service, documented, with the default the code really has."""

from __future__ import annotations

import re

import pytest
from pydantic import SecretStr

from unit.deploy.components import COMPONENTS, ENV_EXAMPLE, Component, parse_env_file

SECRET_VALUE = "a-secret-" + "0" * 32
"""What a test gives each secret setting: long enough for every rule (the tool-cache pepper: 32 characters)."""

TEXT = ENV_EXAMPLE.read_text(encoding="utf-8")
ACTIVE, COMMENTED = parse_env_file(TEXT)
SETTING_LINE = re.compile(r"^#?\s*[A-Z][A-Z0-9_]*=")


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_every_setting_is_in_env_example_with_a_comment_saying_what_it_means(item: Component) -> None:
    lines = TEXT.splitlines()
    undocumented = []
    for name in item.settings_env:
        setting = re.compile(rf"^(# )?{name}=")
        index = next((i for i, line in enumerate(lines) if setting.match(line)), 0)
        above = lines[index - 1] if index > 0 else ""
        if not above.startswith("# ") or SETTING_LINE.match(above):  # the line above must say what it is
            undocumented.append(name)
    assert undocumented == [], f"add these to .env.example, each under a comment that says what it does: {undocumented}"


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_secrets_are_only_named_in_env_example_never_given_a_value(item: Component) -> None:
    assert [name for name in item.secret_env if name in ACTIVE] == []
    assert {name: COMMENTED[name] for name in item.secret_env if COMMENTED.get(name)} == {}


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_the_values_in_env_example_are_the_defaults_of_the_code(
    item: Component, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = {name: value for name, value in ACTIVE.items() if name.startswith(item.prefix)}
    secrets = {name: SECRET_VALUE for name in item.secret_env}  # some services refuse to start without theirs
    from_file = item.load({**ours, **secrets}, monkeypatch)
    defaults = item.load(secrets, monkeypatch)
    differing = {
        item.env(field): (value, getattr(defaults, field))
        for field, value in from_file
        if not isinstance(value, SecretStr) and value != getattr(defaults, field)
    }
    assert differing == {}, f".env.example says (left) what the code does not (right): {differing}"


def test_env_example_names_only_settings_that_exist() -> None:
    known = {name for item in COMPONENTS for name in item.settings_env}
    assert sorted(set(ACTIVE) - known) == []
