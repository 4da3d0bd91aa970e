"""ONNX element types and tensors in luminal terms: the dtypes luminal has, nothing else."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from luminal import dtypes as dt
from luminal.dtypes import DType
from luminal.onnx.errors import OnnxImportError, OnnxUnsupportedError

P = onnx.TensorProto
TO_LUMINAL: dict[int, DType] = {
    P.FLOAT: dt.float32,
    P.DOUBLE: dt.float64,
    P.FLOAT16: dt.float16,
    P.BFLOAT16: dt.bfloat16,
    P.INT8: dt.int8,
    P.INT16: dt.int16,
    P.INT32: dt.int32,
    P.INT64: dt.int64,
    P.UINT8: dt.uint8,
    P.UINT16: dt.uint16,
    P.UINT32: dt.uint32,
    P.UINT64: dt.uint64,
    P.BOOL: dt.bool_,
    P.INT4: dt.int4,
    P.UINT4: dt.uint4,
    P.INT2: dt.int2,
    P.UINT2: dt.uint2,
    P.FLOAT8E4M3FN: dt.float8_e4m3fn,
    P.FLOAT8E4M3FNUZ: dt.float8_e4m3fnuz,
    P.FLOAT8E5M2: dt.float8_e5m2,
    P.FLOAT8E5M2FNUZ: dt.float8_e5m2fnuz,
    P.FLOAT4E2M1: dt.float4_e2m1fn,
}


def type_name(elem_type: int) -> str:
    try:
        return P.DataType.Name(elem_type)
    except ValueError:
        return f"element type {elem_type}"


def to_luminal(elem_type: int, where: str) -> DType:
    """The luminal dtype of an ONNX element type; `where` says what holds it (for the error)."""
    if elem_type not in TO_LUMINAL:
        supported = ", ".join(type_name(t) for t in TO_LUMINAL)
        raise OnnxUnsupportedError(f"{where}: element type {type_name(elem_type)} is not supported ({supported} are)")
    return TO_LUMINAL[elem_type]


def check_array(arr: np.ndarray, where: str) -> np.ndarray:
    """An array whose dtype luminal has (numpy_helper gives bfloat16 as ml_dtypes.bfloat16)."""
    if arr.dtype == ml_dtypes.bfloat16:
        return arr
    try:
        dt.dtype_of(arr.dtype)
    except dt.DTypeError:
        raise OnnxUnsupportedError(f"{where}: element type {arr.dtype} is not supported") from None
    return arr


def tensor_to_array(tensor: onnx.TensorProto, where: str) -> np.ndarray:
    """An initializer or Constant value as a numpy array, its element type checked first."""
    to_luminal(tensor.data_type, where)
    if tensor.data_location == P.EXTERNAL:
        # onnx.load(path) reads external data; a ModelProto built elsewhere may not have it.
        raise OnnxImportError(f"{where}: tensor {tensor.name!r} keeps its data in an external file; load by path")
    try:
        arr = numpy_helper.to_array(tensor)
    except Exception as e:  # a malformed tensor (wrong raw size, bad dims) is the model's defect
        raise OnnxImportError(f"{where}: tensor {tensor.name!r} cannot be read ({e})") from None
    return np.array(arr, order="C")  # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
