"""C for an attention kernel (a loop kernel whose body is an `ir.Attend`): flash attention on the CPU.

Tasks over (the leading indices, a block of LM_ATT_ROWS query rows) run in parallel. A task copies its
queries into a row-major block once, then walks the keys in blocks of LM_ATT_KEYS: it copies that block of
k (transposed, so a row's scores are a vector loop over keys) and of v, computes the block's scores (a block
of fewer keys, a short sequence's, only its keys rounded up to a quarter or half block: 16 keys of a 64-key
block cost a quarter of the products and exponentials), and folds them into each row's running max, running
sum and output accumulator (the online softmax: when the max grows, what was summed so far is rescaled by
exp2((old - new) * log2 e)). Nothing of size keys x queries is ever stored; a task's working set is its
blocks, on its thread's stack.

The softmax is the graph's own: exp2((score - peak) * log2 e) with the peak at least the lowest float32,
which is what the masked-row-safe form clamps it to and changes nothing else (a row's terms and sum are
scaled by the same factor), and the output is the accumulator times 1 / (sum [+ 1 where the sum is under 0.5
in the safe form]).
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.analysis.attention_plan import LOG2_E, MAX_HEAD_DIM, fits
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.affine import affine
from luminal.compiler.renderer.render import literal

ROWS = 32  # queries per task: the key and value blocks are copied once per this many rows
DOT_ROWS = 4  # at most this many query rows (a decode step's one): scores as dot products of key rows, not of a
# transposed copy of the key block, which costs more than a row's products with it
KEYS = 64  # keys per block (LM_ATT_KEYS): a row's block of scores is 64 floats, a few vector registers

# The two products of a task, as register-blocked loops over vector types (contracted to FMAs, as the GEMM's
# micro-kernel is: the rest of the program is built with contraction off so that it rounds as the reference).
PRELUDE = """
#if defined(__AVX512F__)
#define LM_ATT_VBYTES 64
#define LM_ATT_RB 4 /* rows of scores per step: 4 x 4 sixteen-lane accumulators */
#else
#define LM_ATT_VBYTES 32
#define LM_ATT_RB 1 /* 8 eight-lane accumulators of 16 registers */
#endif
#define LM_ATT_VL (LM_ATT_VBYTES / 4)
#define LM_ATT_KEYS 64
#define LM_ATT_KV (LM_ATT_KEYS / LM_ATT_VL)
typedef float lm_av __attribute__((vector_size(LM_ATT_VBYTES)));
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
/* sc[i][0:KV VL] = q[i][0:E] . kt[0:E][0:KV VL] for RB rows from row i (kt is k-major: a key block per e) */
#define LM_ATT_SCORES(RB, KV)                                                                                \
  {                                                                                                          \
    lm_av acc[RB][KV];                                                                                       \
    _Pragma("GCC unroll 16") for (int r = 0; r < RB * KV; r++)                                               \
      acc[r / KV][r % KV] = (lm_av){0};                                                                      \
    for (int64_t e = 0; e < E; e++) {                                                                        \
      lm_av kv[KV];                                                                                          \
      _Pragma("GCC unroll 16") for (int v = 0; v < KV; v++)                                                  \
        memcpy(&kv[v], kt + e * LM_ATT_KEYS + v * LM_ATT_VL, LM_ATT_VBYTES);                                 \
      _Pragma("GCC unroll 16") for (int r = 0; r < RB; r++) {                                                \
        const float a = q[(i + r) * E + e];                                                                  \
        _Pragma("GCC unroll 16") for (int v = 0; v < KV; v++) acc[r][v] += a * kv[v];                        \
      }                                                                                                      \
    }                                                                                                        \
    _Pragma("GCC unroll 16") for (int r = 0; r < RB * KV; r++) {                                             \
      float* to = sc + (i + r / KV) * LM_ATT_KEYS + (r % KV) * LM_ATT_VL;                                    \
      memcpy(to, &acc[r / KV][r % KV], LM_ATT_VBYTES);                                                       \
    }                                                                                                        \
  }
#define LM_ATT_SCORES_ROWS(KV)                                                                               \
  {                                                                                                          \
    int64_t i = 0;                                                                                           \
    for (; i + LM_ATT_RB <= rows; i += LM_ATT_RB) LM_ATT_SCORES(LM_ATT_RB, KV)                               \
    for (; i < rows; i++) LM_ATT_SCORES(1, KV)                                                               \
  }
/* The scores of the first `width` keys of the block (a multiple of LM_ATT_VL): a short sequence's block is
   narrower than LM_ATT_KEYS, and a quarter or half of the key vectors is all it computes. */
static void lm_att_scores(int64_t rows, int64_t E, int64_t width, const float* restrict q,
                          const float* restrict kt, float* restrict sc) {
  if (width <= LM_ATT_KEYS / 4) LM_ATT_SCORES_ROWS((LM_ATT_KV / 4))
  else if (width <= LM_ATT_KEYS / 2) LM_ATT_SCORES_ROWS((LM_ATT_KV / 2))
  else LM_ATT_SCORES_ROWS(LM_ATT_KV)
}
/* acc[i][n0 : n0 + 2 VL] += p[i][0:cols] . v[0:cols][n0 : n0 + 2 VL] for RB rows from row i */
#define LM_ATT_PV(RB)                                                                                        \
  {                                                                                                          \
    lm_av c0[RB], c1[RB];                                                                                    \
    _Pragma("GCC unroll 8") for (int r = 0; r < RB; r++) {                                                   \
      memcpy(&c0[r], acc + (i + r) * N + n0, LM_ATT_VBYTES);                                                 \
      memcpy(&c1[r], acc + (i + r) * N + n0 + LM_ATT_VL, LM_ATT_VBYTES);                                     \
    }                                                                                                        \
    for (int64_t j = 0; j < cols; j++) {                                                                     \
      lm_av v0, v1;                                                                                          \
      memcpy(&v0, v + j * vs + n0, LM_ATT_VBYTES);                                                           \
      memcpy(&v1, v + j * vs + n0 + LM_ATT_VL, LM_ATT_VBYTES);                                               \
      _Pragma("GCC unroll 8") for (int r = 0; r < RB; r++) {                                                 \
        const float a = p[(i + r) * LM_ATT_KEYS + j];                                                        \
        c0[r] += a * v0;                                                                                     \
        c1[r] += a * v1;                                                                                     \
      }                                                                                                      \
    }                                                                                                        \
    _Pragma("GCC unroll 8") for (int r = 0; r < RB; r++) {                                                   \
      memcpy(acc + (i + r) * N + n0, &c0[r], LM_ATT_VBYTES);                                                 \
      memcpy(acc + (i + r) * N + n0 + LM_ATT_VL, &c1[r], LM_ATT_VBYTES);                                     \
    }                                                                                                        \
  }
static void lm_att_pv(int64_t rows, int64_t cols, int64_t N, int64_t vs, const float* restrict p,
                      const float* restrict v, float* restrict acc) {
  int64_t n0 = 0;
  for (; n0 + 2 * LM_ATT_VL <= N; n0 += 2 * LM_ATT_VL) {
    int64_t i = 0;
    for (; i + 6 <= rows; i += 6) LM_ATT_PV(6)
    for (; i < rows; i++) LM_ATT_PV(1)
  }
  for (int64_t i = 0; i < rows; i++)  /* columns past the last whole pair of vectors */
    for (int64_t j = 0; j < cols; j++)
      for (int64_t n = n0; n < N; n++) acc[i * N + n] += p[i * LM_ATT_KEYS + j] * v[j * vs + n];
}
/* sc[i][j] = q[i][0:E] . k[j * ks + 0:E] for the first `cols` keys: a few query rows' scores, each key's row read
   where it lies (no transposed copy of the block for one row to use). */
static void lm_att_dots(int64_t rows, int64_t E, int64_t cols, const float* restrict q, const float* restrict k,
                        int64_t ks, float* restrict sc) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      const float* restrict kj = k + j * ks;
      lm_av acc = (lm_av){0};
      int64_t e = 0;
      for (; e + LM_ATT_VL <= E; e += LM_ATT_VL) {
        lm_av a, b;
        memcpy(&a, q + i * E + e, LM_ATT_VBYTES);
        memcpy(&b, kj + e, LM_ATT_VBYTES);
        acc += a * b;
      }
      float dot = 0.0f;
      _Pragma("GCC unroll 16") for (int l = 0; l < LM_ATT_VL; l++) dot += acc[l];
      for (; e < E; e++) dot += q[i * E + e] * kj[e];
      sc[i * LM_ATT_KEYS + j] = dot;
    }
}
#pragma GCC pop_options
"""


def kernel_source(k: ir.LoopKernel, emitter_cls, head: list[str], ptrs: dict[str, str], store) -> list[str]:
    """The kernel's C lines: `head` is its opening, `store(value)` the statement storing output element i."""
    a: ir.Attend = k.body
    rank = len(k.shape)
    if rank < 2 or not fits(a.e_extent, k.shape[-1]):  # recognition guarantees both; a loaded artifact may not
        raise ValueError(f"attention kernel {k.name}: needs [..., L, N] with head dims in 1..{MAX_HEAD_DIM}")
    lead, row, col = [f"_i{j}" for j in range(rank - 2)], f"_i{rank - 2}", f"_i{rank - 1}"
    e_dim, n_dim = int(a.e_extent.lo), int(k.shape[-1].lo)
    lines = head + ["  int lm_err = 0;"]
    lines.append(f"  const int64_t _tL = {k.shape[-2].render_c()}, _tS = {a.s_extent.render_c()};")
    lines.append(f"  const int64_t _tblocks = (_tL + {ROWS} - 1) / {ROWS};")
    work = " * ".join([f"({d.render_c()})" for d in k.shape[:-2]] + ["_tblocks"])
    lines.append(f"  #pragma omp parallel for collapse({len(lead) + 1}) schedule(static) if ({work} > 1)")
    depth = 1
    for j, d in enumerate(k.shape[:-2]):
        lines.append("  " * depth + f"for (int64_t {lead[j]} = 0; {lead[j]} < {d.render_c()}; {lead[j]}++)")
        depth += 1
    lines.append("  " * depth + "for (int64_t _tb = 0; _tb < _tblocks; _tb++) {")
    dots = k.shape[-2].is_const and int(k.shape[-2]) <= DOT_ROWS
    body = _task(a, row, col, e_dim, n_dim, emitter_cls, ptrs, store, dots)
    lines += ["  " * (depth + 1) + line for line in body]
    lines.append("  " * depth + "}")
    return lines + ["  return lm_err;", "}"]


def _operand(emitter_cls, ptrs, value: ir.Value, target: str) -> list[str]:
    """Statements that evaluate `value` (at the C locals named like its index variables) into `target`."""
    e = emitter_cls(ptrs)
    e.indent = 0
    result = e.emit(value)
    return e.lines + [f"{target} = {result};"]


def _loop(var: str, extent: str, body: list[str], pragma: str = "") -> list[str]:
    head = [pragma] if pragma else []
    return head + [f"for (int64_t {var} = 0; {var} < {extent}; {var}++) {{"] + ["  " + x for x in body] + ["}"]


def _task(a: ir.Attend, row: str, col: str, e_dim: int, n_dim: int, emitter_cls, ptrs, store, dots: bool) -> list[str]:
    s, e = a.s_var, a.e_var
    out = [
        f"const int64_t _tl0 = _tb * {ROWS};",
        f"const int64_t _trows = _tL - _tl0 < {ROWS} ? _tL - _tl0 : {ROWS};",
        f"float _tq[{ROWS} * {e_dim}], _tkt[{e_dim} * {KEYS}], _tv[{KEYS} * {n_dim}], _tacc[{ROWS} * {n_dim}];",
        f"float _tmax[{ROWS}], _tsum[{ROWS}], _tsc[{ROWS} * {KEYS}];",
    ]
    # The query block, and each row's running max, sum and accumulator.
    q_row = _loop(e, str(e_dim), _operand(emitter_cls, ptrs, a.q, f"_tq[_ti * {e_dim} + {e}]"))
    out += _loop("_ti", "_trows", [f"const int64_t {row} = _tl0 + _ti;"] + q_row)
    out += _loop("_ti", str(ROWS), ["_tmax[_ti] = -0x1.fffffep+127f;", "_tsum[_ti] = 0.0f;"])
    out.append(f"memset(_tacc, 0, sizeof(float) * _trows * {n_dim});")  # the task's rows: one at decode, not 32
    block = [
        f"const int64_t _tcols = _tS - _tk0 < {KEYS} ? _tS - _tk0 : {KEYS};",
        # The block's keys rounded up to whole vectors: all the scores and softmax loops touch. The keys past
        # _tcols are zeroed only so their (discarded) scores are read from defined memory; lm_att_pv reads no
        # value past _tcols.
        "const int64_t _twidth = (_tcols + LM_ATT_VL - 1) / LM_ATT_VL * LM_ATT_VL;",
    ]
    if dots:  # a few query rows: each key's row read as it lies (in place, or copied row by row)
        k_at = _in_place(ptrs, a.k, s, e, row)
        if k_at is None:
            k_row = _loop(e, str(e_dim), _operand(emitter_cls, ptrs, a.k, f"_tkt[_tj * {e_dim} + {e}]"))
            block += _loop("_tj", "_tcols", [f"const int64_t {s} = _tk0 + _tj;"] + k_row)
        keys, k_stride = k_at or ("_tkt", str(e_dim))
        block.append(f"lm_att_dots(_trows, {e_dim}, _tcols, _tq, {keys}, {k_stride}, _tsc);")
    else:
        k_col = _loop(e, str(e_dim), _operand(emitter_cls, ptrs, a.k, f"_tkt[{e} * {KEYS} + _tj]"))
        block += _loop("_tj", "_tcols", [f"const int64_t {s} = _tk0 + _tj;"] + k_col)
        block += _loop(
            e, str(e_dim), [f"for (int64_t _tj = _tcols; _tj < _twidth; _tj++) _tkt[{e} * {KEYS} + _tj] = 0.0f;"]
        )
        block.append(f"lm_att_scores(_trows, {e_dim}, _twidth, _tq, _tkt, _tsc);")
    v_at = _in_place(ptrs, a.v, s, col, row)
    if v_at is None:
        v_row = _loop(col, str(n_dim), _operand(emitter_cls, ptrs, a.v, f"_tv[_tj * {n_dim} + {col}]"))
        block += _loop("_tj", "_tcols", [f"const int64_t {s} = _tk0 + _tj;"] + v_row)
    values, v_stride = v_at or ("_tv", str(n_dim))
    block += _loop("_ti", "_trows", _row_update(a, row, col, e_dim, n_dim, emitter_cls, ptrs))
    block.append(f"lm_att_pv(_trows, _tcols, {n_dim}, {v_stride}, _tsc, {values}, _tacc);")
    out += [f"for (int64_t _tk0 = 0; _tk0 < _tS; _tk0 += {KEYS}) {{"] + ["  " + x for x in block] + ["}"]
    guard = " + (_tsum[_ti] < 0.5f ? 1.0f : 0.0f)" if a.safe else ""
    finish = [
        f"const int64_t {row} = _tl0 + _ti;",
        f"const float _tinv = 1.0f / (_tsum[_ti]{guard});",
        *_loop(col, str(n_dim), [store(f"_tacc[_ti * {n_dim} + {col}] * _tinv")]),
    ]
    return out + _loop("_ti", "_trows", finish)


def _in_place(ptrs, v: ir.Value, s: str, inner: str, row: str) -> tuple[str, str] | None:
    """(the C address of the key block's first row, its row stride) where `v` is a float32 load at an index
    affine in the key `s` and `inner` (stride 1) that does not read the query `row`: read in place, not copied."""
    if not isinstance(v, ir.Load) or v.dtype != dt.float32 or row in v.index.symbols():
        return None
    found = affine(v.index, [s, inner])
    if found is None or found[1][inner] != 1 or not found[1][s].is_const:
        return None
    stride = int(found[1][s])
    return f"({ptrs[v.buffer]} + ({found[0].render_c()}) + _tk0 * {stride})", str(stride)


def _row_update(a: ir.Attend, row: str, col: str, e_dim: int, n_dim: int, emitter_cls, ptrs) -> list[str]:
    """One query row's block of scores: scale and bias, then the online softmax (its accumulator rescaled, the
    scores turned into the block's unnormalised probabilities for lm_att_pv)."""
    s = a.s_var
    scale = literal(a.scale, dt.float32)
    lines = [f"const int64_t {row} = _tl0 + _ti;", f"float* restrict _trow = _tsc + _ti * {KEYS};"]
    bias = _operand(emitter_cls, ptrs, a.bias, "const float _tbias")
    lines += _loop(
        "_tj", "_tcols", [f"const int64_t {s} = _tk0 + _tj;"] + bias + [f"_trow[_tj] = _trow[_tj] * {scale} + _tbias;"]
    )
    lines += ["for (int64_t _tj = _tcols; _tj < _twidth; _tj++) _trow[_tj] = -INFINITY;"]
    lines += ["float _tpeak = _tmax[_ti];"]
    peak = ["_tpeak = _trow[_tj] > _tpeak ? _trow[_tj] : _tpeak;"]
    lines += _loop("_tj", "_twidth", peak, "#pragma omp simd reduction(max:_tpeak)")
    lines += [
        f"const float _tscale = exp2f((_tmax[_ti] - _tpeak) * {LOG2_E});",
        "float _tblock = 0.0f;",
    ]
    exp = [f"_trow[_tj] = exp2f((_trow[_tj] - _tpeak) * {LOG2_E});", "_tblock += _trow[_tj];"]
    lines += _loop("_tj", "_twidth", exp, "#pragma omp simd reduction(+:_tblock)")
    lines += ["_tsum[_ti] = _tsum[_ti] * _tscale + _tblock;", "_tmax[_ti] = _tpeak;"]
    lines += [f"float* restrict _tout = _tacc + _ti * {n_dim};"]
    lines += _loop(col, str(n_dim), [f"_tout[{col}] *= _tscale;"], "#pragma omp simd")
    return lines
