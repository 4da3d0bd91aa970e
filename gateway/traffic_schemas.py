"""Bodies of the traffic-split API (gateway/routers/traffic.py): the split a client sends, the split and each
listed version's state it gets back, and the changes of the audit trail."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from luminal.store.traffic import check_percentages

MAX_VERSION_DIGITS = 9  # a version is a PostgreSQL integer; more digits could overflow it


def _version_of(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_VERSION_DIGITS or int(text) < 1:
        raise ValueError(f"version {text!r:.40} is not a positive integer")
    return int(text)


class TrafficSplitUpdate(BaseModel):
    """`{"split": {"1": 90, "2": 10}}`: version -> whole percent, each 1..100, summing to 100."""

    model_config = ConfigDict(extra="forbid")

    # At most 100 versions: each takes at least 1 percent.
    split: Annotated[dict[str, StrictInt], Field(min_length=1, max_length=100)]

    @field_validator("split")
    @classmethod
    def _valid_split(cls, split: dict[str, int]) -> dict[str, int]:
        versions = {_version_of(v): p for v, p in split.items()}
        if len(versions) < len(split):  # "1" and "01"
            raise ValueError(f"a version is named twice: {sorted(split)}")
        check_percentages(versions)
        return split

    def versions(self) -> dict[int, int]:
        return {int(v): p for v, p in self.split.items()}


class VersionTraffic(BaseModel):
    version: int
    percent: int
    status: str  # its deployment's status now (ready, compiling, failed) or "not deployed": only ready ones answer


class TrafficSplitPublic(BaseModel):
    model: str
    # None: no split; the newest deployed version answers requests that name no version.
    split: dict[str, int] | None
    versions: list[VersionTraffic]


class TrafficChangePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # read from a TrafficChangeRow

    id: int
    action: str  # set | rollback | clear
    old_split: dict[str, int] | None
    new_split: dict[str, int] | None
    api_key_id: int | None  # who made the change
    api_key_name: str | None
    changed_at: dt.datetime
