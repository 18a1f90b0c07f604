"""What every wire model of the suite shares: camelCase JSON, ``None`` fields left out, unknown fields ignored; and
the deadline header every call between the services carries (docs/architecture.md).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["DEADLINE_HEADER", "WireModel", "dump"]

DEADLINE_HEADER = "X-Deadline-Ms"
"""Milliseconds the caller still has for this request. A callee never works past it."""


class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


def dump(model: BaseModel) -> str:
    """The JSON a peer expects: camelCase, ``None`` fields left out."""
    return model.model_dump_json(by_alias=True, exclude_none=True)
