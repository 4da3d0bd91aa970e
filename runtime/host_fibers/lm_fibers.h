// The GPU threads of one block, run as fibers on the CPU thread that launches it (the CUDA and Metal host shims:
// runtime/cuda/host_shim/cuda_shim.h, runtime/metal/host_shim/metal_stdlib). Each GPU thread has its own stack
// and runs until it waits at a barrier; the next one that can run goes on. Why not std::threads, as before: a
// barrier over a block of 256 OS threads on a 2-core machine costs 256 kernel wake-ups, and one shuffle is two such
// barriers, so a GEMV kernel took seconds. A switch here is a dozen instructions.
//
// The order is fixed (the lowest-numbered thread that can run, first; with LM_FIBERS_LAST_FIRST the highest), so
// a kernel that reads shared memory another thread writes without a barrier between gets the same wrong value
// every run, not only when the OS interleaves threads badly; and threads that wait at different barriers, which
// hangs a GPU, end the launch with `lm_fibers.hung` set (the driver returns an error status) instead of hanging
// here too.
//
// On x86-64 only compiler built-ins and operator new are used: metal_stdlib includes this, and MSL must not see the
// C library. Other machines switch through <ucontext.h>. No standard container either: every shim build (one per
// test program) instantiates what the headers use, and <vector> and <atomic> were two thirds of a small program's
// g++ time; a block has at most LM_FIBERS_MAX threads, as on a GPU, so fixed arrays do.
#pragma once
#include <cstdint>
#if !defined(__x86_64__) || defined(LM_FIBERS_UCONTEXT)
#include <ucontext.h>
#endif

// Internal linkage for all of it: g++ makes an inline variable a symbol unique in the whole process, so two shim
// libraries loaded together (built with the other switch, or by an older header) would share one pool of fibers
// of different layouts.
namespace {

constexpr unsigned LM_FIBERS_MAX = 1024;  // threads in a block (CUDA's and Metal's limit)

// What GPU threads wait at: `count` of them arrive, then all go on (CUDA's __syncthreads over a block, a warp's
// shuffle over 32 lanes).
struct lm_fiber_barrier {
  unsigned count = 0, arrived = 0;
  uint64_t phase = 0;
};

#if defined(__x86_64__) && !defined(LM_FIBERS_UCONTEXT)
// Where a fiber stopped: its stack pointer, with the callee-saved registers pushed below it.
struct lm_fiber_context {
  void* sp = nullptr;
};

// lm_fiber_switch(&from, to): saves the callee-saved registers on this stack, stores the stack pointer in `from`,
// and returns on the stack `to` (where a switch saved it, or a new fiber's first frame, lm_fiber_prepare).
asm(R"(
  .text
  .p2align 4
lm_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
lm_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
)");
extern "C" void lm_fiber_switch(void** from, void* to) asm("lm_fiber_switch");
extern "C" void lm_fiber_start() asm("lm_fiber_start");

inline void lm_fiber_resume(lm_fiber_context& from, lm_fiber_context& to) { lm_fiber_switch(&from.sp, to.sp); }

// A new fiber's first frame: the registers lm_fiber_switch pops (r13 the entry, r12 its argument), then its
// return into lm_fiber_start, which calls entry(argument) on a 16-byte-aligned stack.
inline void lm_fiber_prepare(lm_fiber_context& c, char* stack, unsigned long size, void (*entry)(void*),
                             void* argument) {
  void** sp = reinterpret_cast<void**>(stack + size - 72);
  sp[0] = sp[1] = sp[4] = sp[5] = nullptr;  // r15, r14, rbx, rbp
  sp[2] = reinterpret_cast<void*>(entry);   // r13
  sp[3] = argument;                         // r12
  sp[6] = reinterpret_cast<void*>(&lm_fiber_start);
  c.sp = sp;
}
#else
// Elsewhere (or with LM_FIBERS_UCONTEXT, as a test builds it): POSIX contexts, slower (a system call per switch
// for the signal mask) and still far cheaper than a thread's wake-up.
typedef ucontext_t lm_fiber_context;

inline void lm_fiber_resume(lm_fiber_context& from, lm_fiber_context& to) { swapcontext(&from, &to); }

inline thread_local void (*lm_fiber_entry_pending)(void*);
inline thread_local void* lm_fiber_argument_pending;

inline void lm_fiber_begin() { lm_fiber_entry_pending(lm_fiber_argument_pending); }

inline void lm_fiber_prepare(lm_fiber_context& c, char* stack, unsigned long size, void (*entry)(void*),
                             void* argument) {
  getcontext(&c);
  c.uc_stack.ss_sp = stack;
  c.uc_stack.ss_size = size;
  c.uc_link = nullptr;
  // makecontext passes only ints: every fiber of a launch starts with the same entry and argument.
  lm_fiber_entry_pending = entry;
  lm_fiber_argument_pending = argument;
  makecontext(&c, lm_fiber_begin, 0);
}
#endif

struct lm_fiber {
  lm_fiber_context context;  // where it last switched away
  char* stack = nullptr;
  const lm_fiber_barrier* waiting = nullptr;
  uint64_t phase = 0;  // the phase of `waiting` it arrived in; it runs again once that phase is over
  bool done = false;
};

// The fibers of the launching CPU thread: their stacks are kept from launch to launch.
struct lm_fiber_pool {
  static constexpr unsigned long STACK = 512 * 1024;  // reserved, not touched: only the pages used are memory
  static constexpr uint64_t CANARY = 0x6c6d2d7374616b21ull;
  lm_fiber* fibers = nullptr;  // LM_FIBERS_MAX of them once a launch ran here, the first `made` with stacks
  unsigned made = 0;
  lm_fiber_context scheduler;
  unsigned current = 0;
  bool hung = false;  // a block's threads waited at different barriers: its launch was abandoned
  ~lm_fiber_pool() {
    for (unsigned t = 0; t < made; t++) ::operator delete(fibers[t].stack);
    delete[] fibers;
  }
};
inline thread_local lm_fiber_pool lm_fibers;

[[noreturn]] inline void lm_fiber_fail(const char* what) {
  __builtin_printf("host shim: %s\n", what);
  __builtin_abort();
}

// Thread `self` arrives at `b` and waits until all `b.count` have (the last to arrive goes on at once).
inline void lm_fiber_wait(lm_fiber_barrier& b) {
  if (++b.arrived == b.count) {
    b.arrived = 0;
    b.phase++;
    return;
  }
  lm_fiber& self = lm_fibers.fibers[lm_fibers.current];
  self.waiting = &b;
  self.phase = b.phase;
  lm_fiber_resume(self.context, lm_fibers.scheduler);
}

template <class Run> void lm_fiber_entry(void* run) {
  lm_fiber_pool& pool = lm_fibers;
  (*static_cast<Run*>(run))(pool.current);
  pool.fibers[pool.current].done = true;
  lm_fiber_resume(pool.fibers[pool.current].context, pool.scheduler);
  __builtin_trap();  // a finished fiber is never resumed
}

// Runs run(t) for t in [0, threads) as fibers until every one has returned; enter(t) is called each time thread t
// resumes (it sets what the kernel reads as its own index). False when they hung: every thread left is waiting,
// and no barrier it waits at can open. The waiting fibers are dropped (kernel code holds nothing to release).
template <class Run, class Enter> bool lm_fibers_run(unsigned threads, Run& run, Enter enter) {
  lm_fiber_pool& pool = lm_fibers;
  if (threads > LM_FIBERS_MAX) lm_fiber_fail("a block of more than 1024 threads (a GPU refuses to launch it)");
  if (pool.fibers == nullptr) pool.fibers = new lm_fiber[LM_FIBERS_MAX];
  for (; pool.made < threads; pool.made++) {
    lm_fiber& f = pool.fibers[pool.made];
    f.stack = static_cast<char*>(::operator new(lm_fiber_pool::STACK));
    *reinterpret_cast<uint64_t*>(f.stack) = lm_fiber_pool::CANARY;
  }
  for (unsigned t = 0; t < threads; t++) {
    lm_fiber& f = pool.fibers[t];
    lm_fiber_prepare(f.context, f.stack, lm_fiber_pool::STACK, &lm_fiber_entry<Run>, &run);
    f.waiting = nullptr;
    f.done = false;
  }
  for (unsigned left = threads; left > 0;) {
    bool ran = false;
    for (unsigned k = 0; k < threads; k++) {
#ifdef LM_FIBERS_LAST_FIRST  // a GPU promises no order among a block's threads either: the last goes first
      const unsigned t = threads - 1 - k;
#else
      const unsigned t = k;
#endif
      lm_fiber& f = pool.fibers[t];
      if (f.done || (f.waiting != nullptr && f.waiting->phase == f.phase)) continue;
      f.waiting = nullptr;
      pool.current = t;
      enter(t);
      lm_fiber_resume(pool.scheduler, f.context);
      if (*reinterpret_cast<uint64_t*>(f.stack) != lm_fiber_pool::CANARY)
        lm_fiber_fail("a GPU thread overflowed its 512 KiB stack");
      left -= f.done;
      ran = true;
    }
    if (!ran) {
      pool.hung = true;
      return false;
    }
  }
  return true;
}

// One launch's synchronisation, as the shims' warp shuffles and block barriers use it: a barrier over the block,
// one per group of 32 threads (a CUDA warp, a Metal SIMD group), and each thread's exchange slot.
struct lm_fiber_block {
  lm_fiber_barrier all;
  lm_fiber_barrier groups[LM_FIBERS_MAX / 32];
  uint64_t exchange[LM_FIBERS_MAX];
  explicit lm_fiber_block(unsigned threads) {
    all.count = threads;
    for (unsigned first = 0; first < threads && first < LM_FIBERS_MAX; first += 32)
      groups[first / 32].count = threads - first < 32 ? threads - first : 32;
  }
};

// Whether a launch since the last call hung (the shims' drivers ask after each launch).
inline bool lm_fibers_hung() {
  const bool hung = lm_fibers.hung;
  lm_fibers.hung = false;
  return hung;
}
}  // namespace
