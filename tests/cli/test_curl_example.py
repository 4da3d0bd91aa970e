"""The curl line `luminal deploy` prints, read back as bash would split it: its body is a request the gateway's own
codec accepts for every datatype a model may take, whatever the input names hold. (tests/cli/test_cli.py runs
the printed line itself against a server.)"""

from __future__ import annotations

import shlex

import numpy as np
import pytest

from luminal.cli.curl_example import MAX_VALUES, curl_command
from luminal.gateway.tensor_codec import BY_LUMINAL_NAME, DATATYPES, parse_infer_request

ENDPOINT = "http://127.0.0.1:8000/v2/models/m/versions/1/infer"


@pytest.mark.parametrize("luminal_dtype", sorted(BY_LUMINAL_NAME))
def test_the_body_is_zeros_the_gateway_accepts(luminal_dtype):
    datatype = BY_LUMINAL_NAME[luminal_dtype]
    names = ["x", "it's $(rm -rf ~)"]  # quotes and shell syntax stay data
    inputs = [{"name": n, "datatype": datatype, "shape": [-1, 3]} for n in names]
    argv = shlex.split(curl_command(ENDPOINT, inputs))
    assert argv[:6] == ["curl", "-H", "Authorization: Bearer $LUMINAL_API_KEY", "-H", "Content-Type: application/json",
                        ENDPOINT]  # fmt: skip
    signature = {"inputs": [{"name": n, "dtype": luminal_dtype, "shape": ["batch", 3]} for n in names], "outputs": []}
    request = parse_infer_request(argv[argv.index("-d") + 1].encode(), None, signature)
    for name in names:
        array = request.inputs[name]
        assert array.shape == (1, 3) and array.dtype == DATATYPES[datatype] and not np.any(array)


def test_the_key_is_expanded_by_bash_in_double_quotes():
    command = curl_command(ENDPOINT, [{"name": "x", "datatype": "FP32", "shape": [2]}])
    assert '-H "Authorization: Bearer $LUMINAL_API_KEY"' in command  # single quotes would send '$LUMINAL_API_KEY'


def test_inputs_too_large_to_spell_out_give_no_line():
    assert curl_command(ENDPOINT, [{"name": "x", "datatype": "FP32", "shape": [-1, MAX_VALUES]}]) is not None
    assert curl_command(ENDPOINT, [{"name": "x", "datatype": "FP32", "shape": [-1, MAX_VALUES + 1]}]) is None
