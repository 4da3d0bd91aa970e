"""The helpers every generated MSL program starts with.

The kernel bodies are the CUDA generator's, which spell a few GPU built-ins the CUDA way (`__syncthreads()`,
`__shared__`, `fmaf`, `__half2float`...): here each is defined once in MSL terms, from the Metal dialect's own
names, so the shared bodies compile unchanged. The rest mirrors compiler/cuda/prelude.py: half-type rounding
(MSL's float -> half and float -> bfloat conversions round to nearest even), the nan-aware max, selects, Python's
floor division, and the SIMD-group and threadgroup folds. A threadgroup fold needs threadgroup memory, which MSL
allows only at kernel scope: each kernel that folds over its threadgroup declares `lm_scratch` (program.py) and
`lm_block_fold` passes it on.
"""

from luminal import dtypes as dt
from luminal.compiler.renderer import integers
from luminal.compiler.renderer.dialects import CUDA, METAL
from luminal.symbolic import c_prelude

INLINE = METAL.device


def _spellings() -> str:
    """The CUDA spellings the shared kernel bodies use, as MSL."""
    lines = [
        f"#define __syncthreads() {METAL.barrier[:-1]}",
        f"#define __shared__ {METAL.shared}",
        "#define __restrict__",
        f"typedef {METAL.storage[dt.float16]} {CUDA.storage[dt.float16]};",
        f"typedef {METAL.storage[dt.bfloat16]} {CUDA.storage[dt.bfloat16]};",
    ]
    for half, to_float, from_float in (
        (dt.float16, "__half2float", "__float2half_rn"),
        (dt.bfloat16, "__bfloat162float", "__float2bfloat16_rn"),
    ):
        ctype = METAL.storage[half]
        lines.append(f"{INLINE} float {to_float}({ctype} h) {{ return (float)h; }}")
        lines.append(f"{INLINE} {ctype} {from_float}(float f) {{ return {METAL.store('f', half)}; }}")
    for op, c_name in CUDA.math.items():
        arity = "float a, float b" if op == "Mod" else "float a"
        call = "a, b" if op == "Mod" else "a"
        lines.append(f"{INLINE} float {c_name}({arity}) {{ return {METAL.math[op]}({call}); }}")
    lines.append(f"{INLINE} float fmaf(float a, float b, float c) {{ return metal::fma(a, b, c); }}")
    lines.append(f"{INLINE} float fmaxf(float a, float b) {{ return metal::fmax(a, b); }}")
    return "\n".join(lines) + "\n"


def _shuffles() -> str:
    """lm_shfl_xor for each type a fold moves; 64-bit values as two 32-bit halves (SIMD shuffles move at most
    32 bits a lane on every Apple GPU family)."""
    s, lines = METAL.shuffle, []
    for t in ("float", "int32_t", "uint32_t"):
        lines.append(f"{INLINE} {t} lm_shfl_xor({t} v, ushort m) {{ return {s}(v, m); }}")
    lines.append(f"{INLINE} uint8_t lm_shfl_xor(uint8_t v, ushort m) {{ return (uint8_t){s}((uint32_t)v, m); }}")
    for t in ("int64_t", "uint64_t"):
        lines.append(
            f"{INLINE} {t} lm_shfl_xor({t} v, ushort m) {{ uint2 h = as_type<uint2>(v); "
            f"return as_type<{t}>(uint2({s}(h.x, m), {s}(h.y, m))); }}"
        )
    return "\n".join(lines) + "\n"


PRELUDE = (
    """#include <metal_stdlib>
using namespace metal;
#ifndef INT32_MIN
#define INT32_MIN (-2147483647 - 1)
#endif
#ifndef INT64_MIN
#define INT64_MIN (-9223372036854775807L - 1)
#endif
"""
    + _spellings()
    # symbolic.c_prelude spells its 64-bit integers `long long`, which MSL reserves: here they are int64_t.
    + c_prelude(INLINE).replace("long long", "int64_t")
    + f"""{INLINE} float lm_round_f16(float f) {{ return (float)(half)f; }}
{INLINE} float lm_round_bf16(float f) {{ return (float)(bfloat)f; }}
{INLINE} float lm_maxf(float acc, float v) {{ return (v > acc || v != v) ? v : acc; }}
{INLINE} float lm_selectf(int c, float a, float b) {{ return c ? a : b; }}
"""
    + integers.prelude(INLINE)
    + """struct lm_fold_sum {
  template <class T> T operator()(T a, T b) const { return a + b; }
};
struct lm_fold_fmax {  /* the larger, a nan ignored: attention's running peak */
  float operator()(float a, float b) const { return metal::fmax(a, b); }
};
struct lm_fold_max {
  float operator()(float a, float b) const { return lm_maxf(a, b); }
  template <class T> T operator()(T a, T b) const { return b > a ? b : a; }
};
"""
    + _shuffles()
    # The GEMV's 16-byte weight load (compiler/gpu/gemv.py): element by element here, contiguous and aligned,
    # which Apple's compiler may merge; measuring a vector type's worth needs a Mac.
    + f"""template <class T> {INLINE} void lm_load16(const device T* p, thread T* out) {{
  for (uint i = 0; i < 16 / sizeof(T); i++) out[i] = p[i];
}}
template <class T, class F> {INLINE} T lm_warp_fold(T v, F f) {{
  for (ushort m = {METAL.simd_width // 2}; m > 0; m >>= 1) v = f(v, lm_shfl_xor(v, m));
  return v;
}}
/* Every thread of the threadgroup gets the fold of all their values; `scratch` is the kernel's lm_scratch. */
/* A fold's value as the 64 bits of a scratch slot, and back (ints by value, which round-trips every width). */
{INLINE} uint64_t lm_bits(float v) {{ return as_type<uint>(v); }}
template <class T> {INLINE} uint64_t lm_bits(T v) {{ return (uint64_t)v; }}
{INLINE} float lm_unbits(uint64_t b, float) {{ return as_type<float>((uint)b); }}
template <class T> {INLINE} T lm_unbits(uint64_t b, T) {{ return (T)b; }}
/* Every thread of the threadgroup gets the fold of all their values; `scratch` is the kernel's lm_scratch. */
template <class T, class F> {INLINE} T lm_block_fold_in(T v, F f, threadgroup uint64_t* scratch, uint tid, uint n) {{
  v = lm_warp_fold(v, f);
  {METAL.barrier}
  if ((tid & {METAL.simd_width - 1}) == 0) scratch[tid / {METAL.simd_width}] = lm_bits(v);
  {METAL.barrier}
  T r = lm_unbits(scratch[0], v);
  for (uint w = 1; w < (n + {METAL.simd_width - 1}) / {METAL.simd_width}; w++) r = f(r, lm_unbits(scratch[w], v));
  return r;
}}
#define lm_block_fold(v, f) lm_block_fold_in(v, f, lm_scratch, threadIdx.x, blockDim.x)
/* V values per thread folded over W SIMD groups at once, thread t < V getting value t's fold: the CUDA prelude's
   lm_block_fold_many, its words in the kernel's lm_scratch (program.py sizes it for V x W). */
template <int V, int W, class T, class F>
{INLINE} T lm_block_fold_many_in(thread T (&v)[V], F f, threadgroup uint64_t* scratch, uint tid) {{
  const uint lane = tid & {METAL.simd_width - 1};
  for (int half = V / 2, m = {METAL.simd_width // 2}; half >= 1; half >>= 1, m >>= 1) {{
    const bool upper = (lane & m) != 0;
    for (int i = 0; i < half; i++) v[i] = f(upper ? v[i + half] : v[i], lm_shfl_xor(upper ? v[i] : v[i + half], m));
  }}
  for (int m = {METAL.simd_width // 2} / V; m > 0; m >>= 1) v[0] = f(v[0], lm_shfl_xor(v[0], m));
  {METAL.barrier}
  const uint per = {METAL.simd_width} / V;
  if (lane % per == 0) scratch[tid / {METAL.simd_width} * V + lane / per] = lm_bits(v[0]);
  {METAL.barrier}
  const uint own = tid % V;
  T r = lm_unbits(scratch[own], v[0]);
  for (int w = 1; w < W; w++) r = f(r, lm_unbits(scratch[w * V + own], v[0]));
  return r;
}}
#define lm_block_fold_many(V, W, v, f) lm_block_fold_many_in<V, W>(v, f, lm_scratch, threadIdx.x)
"""
)
