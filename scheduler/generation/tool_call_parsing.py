"""Reading the tool calls out of a model's free answer (tool_choice "auto"), in its family's format
(tool_call_formats.py). Only well-formed calls count: a call whose JSON does not parse, lacks a string name or an
object of arguments, or is followed by anything but another call, leaves the whole answer as plain content."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from luminal.scheduler.generation.tool_call_formats import PYTHON_TAG, ToolCallFormat

_DECODER = json.JSONDecoder()
_HERMES_BLOCK = re.compile(r"\s*<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # the arguments object as JSON text


def call_start(text: str, fmt: ToolCallFormat) -> int | None:
    """Where the calls of `text` would begin (None: nowhere, so far)."""
    if fmt.after_text:
        found = [i for i in (text.find(s) for s in fmt.starts) if i >= 0]
        return min(found) if found else None
    stripped = text.lstrip()
    return len(text) - len(stripped) if stripped.startswith(fmt.starts) else None


def undecided(text: str, fmt: ToolCallFormat) -> int:
    """How many characters at the end of `text` (which holds no call start) might still begin a call."""
    if not fmt.after_text:
        stripped = text.lstrip()
        return len(text) if any(s.startswith(stripped) for s in fmt.starts) else 0
    longest = 0
    for start in fmt.starts:
        for n in range(min(len(start) - 1, len(text)), 0, -1):
            if text.endswith(start[:n]):
                longest = max(longest, n)
                break
    return longest


def parse_calls(text: str, fmt: ToolCallFormat) -> list[ParsedCall] | None:
    """The calls `text` consists of (it starts where `call_start` says), or None when it is not only calls."""
    bodies = _hermes_bodies(text) if fmt.after_text else _json_objects(text.strip().removeprefix(PYTHON_TAG))
    if not bodies:
        return None
    calls = [_call(body, fmt.arguments_key) for body in bodies]
    return None if any(c is None for c in calls) else calls


def _hermes_bodies(text: str) -> list[object] | None:
    bodies, at = [], 0
    while at < len(text.rstrip()):
        block = _HERMES_BLOCK.match(text, at)
        if block is None:
            return None
        try:
            bodies.append(json.loads(block.group(1)))
        except json.JSONDecodeError:
            return None
        at = block.end()
    return bodies


def _json_objects(text: str) -> list[object] | None:
    """Objects separated by `;`: `{...}; {...}`."""
    objects, at = [], 0
    while True:
        try:
            value, at = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            return None
        objects.append(value)
        rest = text[at:].lstrip()
        if not rest:
            return objects
        if not rest.startswith(";"):
            return None
        at = len(text) - len(rest[1:].lstrip())


def _call(body: object, arguments_key: str) -> ParsedCall | None:
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return None
    # A model may use either family's key; its arguments may come as an object or as that object's JSON text.
    arguments = body.get(arguments_key, body.get("arguments", body.get("parameters")))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(body["name"], json.dumps(arguments, ensure_ascii=False))
