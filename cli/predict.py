"""`luminal predict NAME --input x=file.npy | --input x='[[1, 2]]'`: one inference request from the command line.

Each input's dtype comes from the deployed model's metadata, so a JSON literal like `[[1, 2]]` becomes the
float32 (or int64, ...) tensor the model takes; a value that would lose information in that cast is refused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from luminal.cli.common import KeyOption, UrlOption, fail, out
from luminal.cli.config import client_session
from luminal.cli.oip import decode_response, encode_request
from luminal.gateway.tensor_codec import DATATYPES

# Output names come from the server and become file names: anything else than these characters is replaced.
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


def _read_value(name: str, value: str) -> np.ndarray:
    if value.endswith(".npy"):
        try:
            return np.load(Path(value).expanduser(), allow_pickle=False)  # a pickle could run code: never load one
        except (OSError, ValueError) as e:
            fail(f"input {name!r}: cannot read {value}: {e}")
    try:
        return np.asarray(json.loads(value))
    except (ValueError, RecursionError) as e:
        fail(f"input {name!r}: {value[:40]!r} is neither a .npy file nor a JSON value ({e})")


def _as_datatype(name: str, array: np.ndarray, datatype: str) -> np.ndarray:
    """`array` as the model's dtype; refused when the values would change kind (3.5 into an int64 input)."""
    dtype = DATATYPES[datatype]
    if array.dtype == object or not np.can_cast(array.dtype, dtype, casting="same_kind"):
        fail(f"input {name!r}: {array.dtype} values cannot be passed as {datatype}")
    return array.astype(dtype)


def parse_inputs(pairs: list[str], metadata: dict) -> dict[str, tuple[str, np.ndarray]]:
    """`name=value` pairs checked against the model's inputs: every input given once, no unknown name."""
    datatypes = {t["name"]: t["datatype"] for t in metadata["inputs"]}
    inputs: dict[str, tuple[str, np.ndarray]] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            fail(f"--input {pair[:40]!r} is not NAME=FILE.npy or NAME=JSON")
        if name not in datatypes:
            fail(f"the model has no input {name!r}; its inputs are {sorted(datatypes)}")
        if name in inputs:
            fail(f"input {name!r} is given twice")
        inputs[name] = (datatypes[name], _as_datatype(name, _read_value(name, value), datatypes[name]))
    missing = sorted(set(datatypes) - set(inputs))
    if missing:
        fail(f"missing --input for {missing}")
    return inputs


def _file_name(output: str, taken: set[str]) -> str:
    stem = _UNSAFE_FILE_CHARS.sub("_", output).lstrip(".") or "output"
    name, n = f"{stem}.npy", 1
    while name in taken:  # two names that sanitise alike must not overwrite each other
        n += 1
        name = f"{stem}-{n}.npy"
    taken.add(name)
    return name


def predict(
    name: Annotated[str, typer.Argument(help="the deployed model's name")],
    inputs: Annotated[
        list[str] | None, typer.Option("--input", "-i", help="NAME=FILE.npy or NAME=JSON, once per input")
    ] = None,
    version: Annotated[int | None, typer.Option(min=1, help="the model version (default: newest deployed)")] = None,
    binary: Annotated[bool, typer.Option(help="send and receive tensors as binary data, not JSON")] = False,
    output_dir: Annotated[Path | None, typer.Option(help="save each output as DIR/NAME.npy instead")] = None,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Run one inference request and print each output (name, datatype, shape, values abbreviated)."""
    with client_session(url, api_key) as client:
        request = encode_request(parse_inputs(inputs or [], client.model_metadata(name, version)), binary)
        response = client.infer(name, version, request.body, request.json_length)
        outputs = decode_response(response.content, response.headers.get("Inference-Header-Content-Length"))
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        taken: set[str] = set()
        for output, (_, array) in outputs.items():
            path = output_dir / _file_name(output, taken)
            np.save(path, array, allow_pickle=False)
            out.print(f"{output}: saved {list(array.shape)} to {path}", highlight=False, markup=False)
        return
    for output, (datatype, array) in outputs.items():
        values = np.array2string(array, threshold=20, edgeitems=3, precision=5, separator=", ")
        out.print(f"{output} {datatype} {list(array.shape)}", highlight=False, markup=False)
        out.print(values, highlight=False, markup=False)
