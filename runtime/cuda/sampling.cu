// Choosing each sequence's next token on the device, one block per row of logits (runtime/cuda/sampler.py runs it;
// luminal/runtime/sampling.py is its meaning in numpy). Per row: scores = logits (+ bias) with tokens outside the
// allowed bitmask at -inf; greedy (temperature 0) takes the highest score, lowest id on ties; otherwise
// z = scores / temperature, the top-k cut keeps z >= the k-th largest z (ties kept, as Hugging Face does), the
// nucleus keeps the tokens whose more probable kept tokens hold less than top_p of the kept mass, and the token
// is the Gumbel-max draw over what is kept: argmax z + g, g = -log(-log(u)), u from a counter-based generator
// keyed by (key, counter, token id), so a draw depends on nothing else in the batch. Thresholds are found by
// bisecting the bits of an order-preserving key of each float (32 block-wide counts or sums), never by sorting.
// With logprobs asked (n >= 0): the chosen token's log-probability under the raw logits' softmax and the n most
// likely tokens (most likely first, lower id first on ties).
#include <math.h>
#include <stdint.h>

#ifndef LM_SAMPLE_THREADS
#define LM_SAMPLE_THREADS 256  // threads per row: a power of two (the reductions halve it)
#endif
#define LM_NO_TOKEN 0x7fffffffffffffffLL

#ifdef LM_HOST_SHIM
inline uint32_t __float_as_uint(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}
#endif

// Unsigned keys in the order of the floats (-inf lowest): thresholds are bisected over these 32 bits.
__device__ __forceinline__ uint32_t lm_order_key(float f) {
  const uint32_t bits = __float_as_uint(f);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// splitmix64's finaliser: the counter-based generator's mixing step.
__device__ __forceinline__ uint64_t lm_mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// u in (0, 1) for token `i` of the stream (key, counter): 24 random bits, centred in their interval.
__device__ __forceinline__ float lm_uniform(uint64_t stream, int64_t i) {
  const uint64_t h = lm_mix(stream + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL);
  return ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

__device__ float lm_block_sum(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = LM_SAMPLE_THREADS / 2; half > 0; half >>= 1) {
    if ((int)threadIdx.x < half) scratch[threadIdx.x] += scratch[threadIdx.x + half];
    __syncthreads();
  }
  const float total = scratch[0];
  __syncthreads();  // everyone has read it before the scratch is written again
  return total;
}

// The best (value, index) over the block: larger value, then lower index; LM_NO_TOKEN where no thread had one.
__device__ int64_t lm_block_best(float v, int64_t i, float* values, int64_t* indices) {
  values[threadIdx.x] = v;
  indices[threadIdx.x] = i;
  __syncthreads();
  for (int half = LM_SAMPLE_THREADS / 2; half > 0; half >>= 1) {
    if ((int)threadIdx.x < half) {
      const float ov = values[threadIdx.x + half];
      const int64_t oi = indices[threadIdx.x + half];
      const int64_t mi = indices[threadIdx.x];
      if (oi != LM_NO_TOKEN && (mi == LM_NO_TOKEN || ov > values[threadIdx.x] || (ov == values[threadIdx.x] && oi < mi))) {
        values[threadIdx.x] = ov;
        indices[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const int64_t best = indices[0];
  __syncthreads();
  return best;
}

__device__ float lm_block_max(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = LM_SAMPLE_THREADS / 2; half > 0; half >>= 1) {
    if ((int)threadIdx.x < half) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + half]);
    __syncthreads();
  }
  const float top = scratch[0];
  __syncthreads();
  return top;
}

__device__ __forceinline__ void lm_offer(float v, int64_t i, float* best_v, int64_t* best_i) {
  if (*best_i == LM_NO_TOKEN || v > *best_v || (v == *best_v && i < *best_i)) {
    *best_v = v;
    *best_i = i;
  }
}

struct lm_row {
  const float* logits;
  const float* bias;       // null: none
  const uint32_t* allowed;  // null: every token allowed
  int64_t vocab;
};

__device__ __forceinline__ float lm_score(const lm_row& row, int64_t i) {
  if (row.allowed && !((row.allowed[i >> 5] >> (i & 31)) & 1u)) return -INFINITY;
  return row.bias ? row.logits[i] + row.bias[i] : row.logits[i];
}

// Over the kept tokens (z finite, order key >= floor) whose key is above `above` when `strictly`: their count, or
// with `mass` their summed exp(z - top).
__device__ float lm_kept(const lm_row& row, float temperature, float top, uint32_t floor, uint32_t above, bool mass,
                         float* scratch, bool strictly = false) {
  float total = 0.0f;
  for (int64_t i = threadIdx.x; i < row.vocab; i += LM_SAMPLE_THREADS) {
    const float z = lm_score(row, i) / temperature;
    const uint32_t key = lm_order_key(z);
    if (z > -INFINITY && key >= floor && (!strictly || key > above)) total += mass ? expf(z - top) : 1.0f;
  }
  return lm_block_sum(total, scratch);
}

// D: vocab, logits row stride, top capacity (columns of top_ids), has bias, has allowed bitmask.
// row_ints [rows, 5]: top_k (0: off), key, counter, logprobs (-1: none), the row of `logits` it reads (so a batch's
// rows are chosen from without gathering them). row_floats [rows, 2]: temperature, top_p.
extern "C" __global__ void __launch_bounds__(LM_SAMPLE_THREADS)
    lm_sample_rows(int64_t* tokens, float* chosen_logprobs, int64_t* top_ids, float* top_logprobs,
                   const float* logits, const float* row_floats, const int64_t* row_ints, const float* bias,
                   const uint32_t* allowed, const int64_t* D) {
  __shared__ float lm_values[LM_SAMPLE_THREADS];
  __shared__ int64_t lm_indices[LM_SAMPLE_THREADS];
  const int64_t r = blockIdx.x, vocab = D[0], capacity = D[2];
  const int64_t words = (vocab + 31) / 32;
  const lm_row row = {logits + row_ints[5 * r + 4] * D[1], D[3] ? bias + r * vocab : nullptr, D[4] ? allowed + r * words : nullptr, vocab};
  const float temperature = row_floats[2 * r], top_p = row_floats[2 * r + 1];
  const int64_t top_k = row_ints[5 * r], key = row_ints[5 * r + 1], counter = row_ints[5 * r + 2];
  const int64_t asked = row_ints[5 * r + 3];
  float best_v = 0.0f;
  int64_t best_i = LM_NO_TOKEN;
  int64_t token;
  if (temperature == 0.0f) {  // greedy
    for (int64_t i = threadIdx.x; i < vocab; i += LM_SAMPLE_THREADS) {
      const float s = lm_score(row, i);
      if (s > -INFINITY) lm_offer(s, i, &best_v, &best_i);
    }
    token = lm_block_best(best_v, best_i, lm_values, lm_indices);
  } else {
    float top = -INFINITY;
    for (int64_t i = threadIdx.x; i < vocab; i += LM_SAMPLE_THREADS) top = fmaxf(top, lm_score(row, i) / temperature);
    top = lm_block_max(top, lm_values);
    uint32_t floor = 0;  // a token is kept when its z is finite and its order key is at least this
    if (top_k > 0 && top_k < vocab) {  // the largest key that top_k tokens reach: the k-th largest z's
      for (int bit = 31; bit >= 0; bit--) {
        const uint32_t candidate = floor | (1u << bit);
        if (lm_kept(row, temperature, top, candidate, 0u, false, lm_values) >= (float)top_k) floor = candidate;
      }
    }
    if (top_p < 1.0f) {
      // held(K): the kept mass of keys above K, falling as K grows; a token is kept when the mass above its own
      // key is under top_p of the kept mass, so the cut keeps the keys above the largest K with held(K) >= that.
      const float target = top_p * lm_kept(row, temperature, top, floor, 0u, true, lm_values);
      if (lm_kept(row, temperature, top, floor, 0u, true, lm_values, true) >= target) {
        uint32_t above = 0;
        for (int bit = 31; bit >= 0; bit--) {
          const uint32_t candidate = above | (1u << bit);
          if (lm_kept(row, temperature, top, floor, candidate, true, lm_values, true) >= target) above = candidate;
        }
        floor = above + 1u > floor ? above + 1u : floor;
      }
    }
    const uint64_t stream = lm_mix(lm_mix((uint64_t)key) + (uint64_t)counter);
    for (int64_t i = threadIdx.x; i < vocab; i += LM_SAMPLE_THREADS) {
      const float z = lm_score(row, i) / temperature;
      if (z > -INFINITY && lm_order_key(z) >= floor) lm_offer(z - logf(-logf(lm_uniform(stream, i))), i, &best_v, &best_i);
    }
    token = lm_block_best(best_v, best_i, lm_values, lm_indices);
  }
  if (threadIdx.x == 0) tokens[r] = token == LM_NO_TOKEN ? -1 : token;
  if (asked < 0) return;  // uniform over the block: every thread returns
  float top_raw = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += LM_SAMPLE_THREADS) top_raw = fmaxf(top_raw, row.logits[i]);
  top_raw = lm_block_max(top_raw, lm_values);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += LM_SAMPLE_THREADS) sum += expf(row.logits[i] - top_raw);
  const float log_total = top_raw + logf(lm_block_sum(sum, lm_values));
  if (threadIdx.x == 0) chosen_logprobs[r] = token == LM_NO_TOKEN ? -INFINITY : row.logits[token] - log_total;
  float last_v = INFINITY;
  int64_t last_i = -1;
  for (int64_t j = 0; j < asked && j < capacity && j < vocab; j++) {  // the next best after the last one taken
    best_i = LM_NO_TOKEN;
    for (int64_t i = threadIdx.x; i < vocab; i += LM_SAMPLE_THREADS) {
      const float v = row.logits[i];
      if (v < last_v || (v == last_v && i > last_i)) lm_offer(v, i, &best_v, &best_i);
    }
    last_i = lm_block_best(best_v, best_i, lm_values, lm_indices);
    last_v = row.logits[last_i];
    if (threadIdx.x == 0) {
      top_ids[r * capacity + j] = last_i;
      top_logprobs[r * capacity + j] = last_v - log_total;
    }
  }
}
