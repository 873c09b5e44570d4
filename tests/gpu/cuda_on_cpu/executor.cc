// CUDA-on-CPU: the executor. A pool of OS threads, one per CUDA thread of a
// block (created on first need, reused by every block and launch), runs the
// blocks of a grid one after another.
//
// Scheduling. All of a block's threads are runnable at once and the kernel
// schedules them over the cores; a thread that must wait (a barrier, a warp
// meeting) sleeps on a futex that the thread completing the barrier or
// meeting wakes. (Handing a single "baton" from thread to thread costs the
// same CPU per switch but leaves the cores idle between hand-overs when the
// machine is busy.) A count of the threads neither waiting nor gone tells a
// deadlock at once: the thread that brings it to zero while others wait.
//
// Happens-before. The only edges the layer makes between the threads of a
// block are CUDA's: a barrier's arrivals are acq_rel read-modify-writes on
// one word and its waiters acquire the generation its opener released; a
// warp meeting likewise. Everything else the layer shares between threads
// is atomic and relaxed (or, for the rare meetings of part of a warp, under
// a lock ThreadSanitizer does not see), so two CUDA threads that touch the
// same memory with no barrier between them are a race for ThreadSanitizer,
// whatever order they ran in. The hand-over from the main thread to a
// block's threads (a release they each acquire) and back (each thread's
// leaving, acquired by the main thread) orders a block after everything the
// host did before the launch and before what it does after, as a launch
// does.

#include "tests/gpu/cuda_on_cpu/executor.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

extern "C" void __sanitizer_set_death_callback(void (*callback)(void))
    __attribute__((weak));

namespace cuda_on_cpu {
namespace {

constexpr int kWarp = 32;
constexpr int kMaxWarps = kMaxThreadsPerBlock / kWarp;
constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;
constexpr auto kAcqRel = std::memory_order_acq_rel;

using Clock = std::chrono::steady_clock;

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "futex words are plain 32-bit integers");

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               long timeout_ms) {
  struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE,
          expected, timeout_ms < 0 ? nullptr : &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE,
          INT_MAX, nullptr, nullptr, 0);
}

// How long a waiting thread sleeps before it looks at the abort flag again.
constexpr long kWaitSliceMs = 200;

// A lock ThreadSanitizer does not see (an xchg is a full barrier on x86),
// so that it orders the layer's bookkeeping without ordering the kernels'
// accesses of the threads that take it.
class HiddenLock {
 public:
  void lock() {
    while (Exchange(1) != 0) {
      while (word_ != 0) __builtin_ia32_pause();
    }
  }
  void unlock() { Exchange(0); }

 private:
  int Exchange(int v) {
#if defined(__x86_64__)
    asm volatile("xchgl %0, %1" : "+r"(v), "+m"(word_) : : "memory");
    return v;
#else
#error "CUDA-on-CPU's HiddenLock is written for x86-64"
#endif
  }
  volatile int word_ = 0;
};

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

std::string Dim(dim3 d) { return Format("(%u,%u,%u)", d.x, d.y, d.z); }

// Bumped whenever a block moves on: the main thread's watchdog calls a
// block hung when it stops.
std::atomic<uint64_t> g_progress{0};

// What the run cost, printed at exit when CUDA_ON_CPU_STATS is set.
struct Stats {
  std::atomic<uint64_t> launches{0}, blocks{0}, threads{0}, waits{0},
      barriers{0}, meetings{0};
  std::atomic<int64_t> kernel_ns{0};
  ~Stats() {
    if (std::getenv("CUDA_ON_CPU_STATS") == nullptr) return;
    std::fprintf(stderr,
                 "CUDA-on-CPU stats: %llu launches, %llu blocks, %llu "
                 "threads run, %llu waits, %llu __syncthreads "
                 "opened, %llu warp meetings, %.1f s in kernels\n",
                 static_cast<unsigned long long>(launches.load()),
                 static_cast<unsigned long long>(blocks.load()),
                 static_cast<unsigned long long>(threads.load()),
                 static_cast<unsigned long long>(waits.load()),
                 static_cast<unsigned long long>(barriers.load()),
                 static_cast<unsigned long long>(meetings.load()),
                 kernel_ns.load() * 1e-9);
  }
} g_stats;

// ------------------------------------------------------------- threads ----

enum State : int { kIdle, kRunning, kAtSyncthreads, kAtWarp, kLeft };
enum JumpReason : int { kNoJump, kAborted, kFaulted, kTrapped };

const char* OpName(int op) {
  switch (op) {
    case kWarpShflIdx: return "__shfl_sync";
    case kWarpShflUp: return "__shfl_up_sync";
    case kWarpShflDown: return "__shfl_down_sync";
    case kWarpShflXor: return "__shfl_xor_sync";
    case kWarpBallot: return "__ballot_sync";
    case kWarpSync: return "__syncwarp";
  }
  return "?";
}

struct Block;

// One pool thread: the CUDA thread it runs, and its futex word.
struct ThreadCtx {
  Block* block = nullptr;
  int tid = 0, lane = 0, warp = 0;
  uint32_t block_seq = 0;  // __syncthreads_count & co so far: their parity
  sigjmp_buf jmp;
  volatile sig_atomic_t in_kernel = 0;
  char fault[256] = {};
  char report[768] = {};  // the first sanitizer report's summary
  bool has_report = false;
  std::vector<std::string> errors;  // this thread's; read after the block
  // Read by whoever describes a deadlock.
  std::atomic<int> state{kIdle};
  std::atomic<const char*> wait_what{nullptr};
  std::atomic<const char*> wait_file{nullptr};
  std::atomic<int> wait_line{0};

  void AddError(const std::string& what) {
    if (errors.size() < 3) errors.push_back(what);
  }
};

thread_local ThreadCtx* t_ctx = nullptr;

struct WarpSlot {
  uint64_t value;
  unsigned mask;
  int op, arg, width;
  const char* file;
  int line;
};

// A barrier of n threads that also counts threads that have left the kernel:
// it opens when each has either arrived or left. A warp's barrier also
// records which lanes arrived at each meeting, by the parity of the
// generation they arrived at.
struct Barrier {
  std::atomic<uint64_t> state{0};  // arrived | left << 32
  std::atomic<uint32_t> generation{0};
  uint32_t n = 0;
  uint32_t left_at_open = 0;  // written by the opener before it releases
  std::atomic<unsigned> arrived_mask[2] = {{0}, {0}};
  unsigned participants[2] = {0, 0};

  void Reset(uint32_t count) {
    state.store(0, kRelaxed);
    arrived_mask[0].store(0, kRelaxed);
    arrived_mask[1].store(0, kRelaxed);
    n = count;
    left_at_open = 0;
  }
  static uint32_t Arrived(uint64_t s) { return static_cast<uint32_t>(s); }
  static uint32_t Left(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
};

// A meeting of a subset of a warp's lanes (a mask that leaves live lanes
// out); a lane is in at most one at a time, so a warp needs at most 32.
struct Meeting {
  std::atomic<unsigned> mask{0};  // 0: free
  std::atomic<unsigned> arrived{0};
  std::atomic<unsigned> participants{0};
  std::atomic<int> readers_done{0};
  std::atomic<uint32_t> complete{0};  // 1 when it met (the futex word)
  WarpSlot slots[kWarp];
};

struct Warp {
  uint32_t lanes = 0;
  unsigned existing = 0;  // the lanes this warp has in this block
  Barrier barrier;
  WarpSlot slots[2][kWarp];
  std::atomic<unsigned> left{0};
  HiddenLock meetings_lock;
  Meeting meetings[kWarp];
};

struct LaunchInfo {
  LaunchSite site;
  std::string signature;
  dim3 grid, block;
  size_t shared_bytes;
  void* dynamic_shared;
  ThreadBody body;
  const void* closure;
};

std::string Describe(const LaunchInfo& l) {
  return Format("kernel %s [%s] launched at %s:%d with grid %s, block %s, %zu "
                "bytes of dynamic shared memory",
                l.site.kernel, l.signature.c_str(), ShortPath(l.site.file),
                l.site.line, Dim(l.grid).c_str(), Dim(l.block).c_str(),
                l.shared_bytes);
}

struct Block {
  const LaunchInfo* launch = nullptr;
  uint3 idx = {0, 0, 0};
  uint32_t nthreads = 0;
  Barrier barrier;
  int reduce[2][kMaxThreadsPerBlock];
  Warp warps[kMaxWarps];
  // Threads neither waiting nor gone: when one that starts to wait brings it
  // to zero while threads remain, nothing can wake them.
  std::atomic<uint32_t> running{0};
  std::atomic<uint32_t> finished{0};
  std::atomic<bool> abort{false};
  std::atomic<bool> early_exit_reported{false};
};

struct Worker {
  pthread_t thread;
  int index = 0;
  ThreadCtx ctx;
};

struct Pool {
  std::vector<std::unique_ptr<Worker>> workers;
  // Worker k sleeps on start[k / 32]; the main thread bumps (release) and
  // wakes the words of a block's warps to start it.
  std::atomic<uint32_t> start[kMaxWarps];
  // The block to run: its sequence number (high half) and thread count (low
  // half), published in one word (release) once the block is set up. One
  // word, because a worker woken late by an earlier block's bump (one past
  // the earlier block's thread count, in a warp it shared) must not pair
  // that old bump with the next block's count: it would run the next block
  // early and then again at that block's own bump, arriving twice at every
  // barrier. A worker runs each sequence number at most once, whichever
  // bump it wakes to.
  std::atomic<uint64_t> ticket{0};
  std::atomic<bool> shutdown{false};
  Block block;
  const LaunchInfo* launch = nullptr;
  // Bumped (and woken) by the block's last thread to leave.
  std::atomic<uint32_t> done{0};
};

Pool* g_pool = nullptr;
// The launch running now, for the sanitizers' death callback.
std::atomic<const LaunchInfo*> g_running{nullptr};

std::string Where(const ThreadCtx& c) {
  const uint3 b = c.block->idx;
  return Format("block (%u,%u,%u) thread (%u,%u,%u)", b.x, b.y, b.z,
                threadIdx.x, threadIdx.y, threadIdx.z);
}

// ----------------------------------------------------------- waiting ----

ThreadCtx& Ctx(int tid) { return g_pool->workers[tid]->ctx; }

[[noreturn]] void Unwind(ThreadCtx* ctx, JumpReason why) {
  ctx->in_kernel = 0;
  siglongjmp(ctx->jmp, why);
}

// What each thread of a stuck block is doing, consecutive equal ones merged.
std::string StuckThreads(const Block& b) {
  std::string out, previous;
  int from = 0;
  const int n = static_cast<int>(b.nthreads);
  for (int i = 0; i <= n; ++i) {
    std::string now;
    if (i < n) {
      const ThreadCtx& c = Ctx(i);
      switch (c.state.load(kRelaxed)) {
        case kRunning: now = "running"; break;
        case kLeft: now = "left the kernel"; break;
        case kIdle: now = "not started"; break;
        default:
          now = Format("wait at %s (%s:%d)", c.wait_what.load(kRelaxed),
                       ShortPath(c.wait_file.load(kRelaxed)),
                       c.wait_line.load(kRelaxed));
      }
    }
    if (i == n || now != previous) {
      if (!previous.empty()) {
        out += (out.empty() ? "" : "; ") +
               (from == i - 1 ? Format("thread %d", from)
                              : Format("threads %d-%d", from, i - 1)) +
               " " + previous;
      }
      previous = now;
      from = i;
    }
  }
  return out;
}

// Every thread left is waiting: nothing can wake them. Reports where each
// waits and aborts the block: each waiter unwinds out of its kernel.
void Deadlock(ThreadCtx* ctx) {
  Block& b = *ctx->block;
  if (!b.abort.exchange(true, kRelaxed)) {
    ctx->AddError(Format(
        "block (%u,%u,%u) is deadlocked (no thread can go on): %s", b.idx.x,
        b.idx.y, b.idx.z, StuckThreads(b).c_str()));
  }
  FutexWakeAll(&b.barrier.generation);
  for (Warp& w : b.warps) FutexWakeAll(&w.barrier.generation);
}

bool AnyWaiting(const Block& b) {
  for (uint32_t i = 0; i < b.nthreads; ++i) {
    const int state = Ctx(i).state.load(kRelaxed);
    if (state == kAtSyncthreads || state == kAtWarp) return true;
  }
  return false;
}

// The calling thread stops running until *word leaves `old` (a barrier or
// meeting opened); unwinds if the block is aborted meanwhile.
void WaitWhile(ThreadCtx* ctx, std::atomic<uint32_t>* word, uint32_t old) {
  Block& b = *ctx->block;
  g_stats.waits.fetch_add(1, kRelaxed);
  if (b.running.fetch_sub(1, kRelaxed) == 1 && word->load(kRelaxed) == old) {
    Deadlock(ctx);
  }
  while (word->load(kAcquire) == old) {
    if (b.abort.load(kRelaxed)) Unwind(ctx, kAborted);
    FutexWait(word, old, kWaitSliceMs);
  }
  if (b.abort.load(kRelaxed)) Unwind(ctx, kAborted);
}

void SetWaiting(ThreadCtx* ctx, State state, const char* what,
                const char* file, int line) {
  ctx->wait_what.store(what, kRelaxed);
  ctx->wait_file.store(file, kRelaxed);
  ctx->wait_line.store(line, kRelaxed);
  ctx->state.store(state, kRelaxed);
}

// --------------------------------------------------------- barriers -------

// Opens the barrier, waking its `waiting` threads.
void Open(Block& b, Barrier& barrier, uint64_t s, uint32_t waiting) {
  const int parity = barrier.generation.load(kRelaxed) & 1;
  barrier.participants[parity] =
      barrier.arrived_mask[parity].exchange(0, kRelaxed);
  barrier.left_at_open = Barrier::Left(s);
  barrier.state.store(static_cast<uint64_t>(Barrier::Left(s)) << 32, kRelaxed);
  b.running.fetch_add(waiting, kRelaxed);
  barrier.generation.fetch_add(1, kRelease);
  if (waiting > 0) FutexWakeAll(&barrier.generation);
  g_progress.fetch_add(1, kRelaxed);
}

// Arrives and waits until the barrier opens; returns the generation it
// arrived at. `before(parity)` runs first (a warp lane fills its slot).
template <typename Before>
uint32_t Arrive(ThreadCtx* ctx, Barrier& barrier, const Before& before) {
  Block& b = *ctx->block;
  const uint32_t g = barrier.generation.load(kAcquire);
  before(static_cast<int>(g & 1));
  const uint64_t s = barrier.state.fetch_add(1, kAcqRel) + 1;
  if (Barrier::Arrived(s) + Barrier::Left(s) == barrier.n) {
    Open(b, barrier, s, Barrier::Arrived(s) - 1);
  } else {
    WaitWhile(ctx, &barrier.generation, g);  // acquires the opener's edge
  }
  return g;
}

// The calling thread leaves the kernel: it counts as arrived from now on.
void Leave(Block& b, Barrier& barrier) {
  const uint64_t s =
      barrier.state.fetch_add(uint64_t{1} << 32, kAcqRel) + (uint64_t{1} << 32);
  if (Barrier::Arrived(s) > 0 &&
      Barrier::Arrived(s) + Barrier::Left(s) == barrier.n) {
    Open(b, barrier, s, Barrier::Arrived(s));
  }
}

ThreadCtx* CurrentThread(const char* what) {
  ThreadCtx* ctx = t_ctx;
  if (ctx == nullptr || !ctx->in_kernel) {
    std::fprintf(stderr, "CUDA-on-CPU: %s called outside a kernel\n", what);
    std::abort();
  }
  return ctx;
}

// ---------------------------------------------------- warp meetings ------

// The result for `lane` of the meeting, given what every participant
// brought; records lanes that disagree or a read of a lane not taking part.
uint64_t MeetingResult(ThreadCtx* ctx, const WarpSlot* slots,
                       unsigned participants, int lane) {
  const WarpSlot& me = slots[lane];
  for (unsigned rest = participants; rest != 0; rest &= rest - 1) {
    const int j = __builtin_ctz(rest);
    const WarpSlot& other = slots[j];
    if (j < lane &&
        (other.op != me.op || other.mask != me.mask ||
         (me.op != kWarpBallot && me.op != kWarpSync &&
          other.width != me.width))) {
      ctx->AddError(Format(
          "%s: lanes disagree at a warp intrinsic: lane %d calls %s(mask "
          "0x%08x, width %d) at %s:%d, lane %d calls %s(mask 0x%08x, width "
          "%d) at %s:%d",
          Where(*ctx).c_str(), lane, OpName(me.op), me.mask, me.width,
          ShortPath(me.file), me.line, j, OpName(other.op), other.mask,
          other.width, ShortPath(other.file), other.line));
    }
  }
  if (me.op == kWarpSync) return 0;
  if (me.op == kWarpBallot) {
    uint64_t ballot = 0;
    for (unsigned rest = participants; rest != 0; rest &= rest - 1) {
      const int j = __builtin_ctz(rest);
      if (slots[j].value != 0) ballot |= uint64_t{1} << j;
    }
    return ballot;
  }
  const int width = me.width;
  const int first = lane & ~(width - 1);  // this lane's segment
  int src = lane;
  switch (me.op) {
    case kWarpShflIdx:
      src = first + (me.arg & (width - 1));
      break;
    case kWarpShflUp:
      src = lane - me.arg < first ? lane : lane - me.arg;
      break;
    case kWarpShflDown:
      src = lane + me.arg >= first + width ? lane : lane + me.arg;
      break;
    case kWarpShflXor:
      src = lane ^ me.arg;
      if (src < 0 || src >= first + width || src >= kWarp) src = lane;
      break;
  }
  if (src != lane && !(participants >> src & 1u)) {
    ctx->AddError(Format(
        "%s: %s(mask 0x%08x, ..., %d, width %d) at %s:%d in lane %d reads "
        "lane %d, which does not take part (not in the mask, not in the "
        "block, or gone): its value is undefined",
        Where(*ctx).c_str(), OpName(me.op), me.mask, me.arg, width,
        ShortPath(me.file), me.line, lane, src));
    return me.value;
  }
  return slots[src].value;
}

// Completes meeting m, under its warp's lock, if every live lane it names
// has arrived: wakes the lanes waiting (all but `self_lane`).
bool TryComplete(Block& b, Warp& w, Meeting& m, int self_lane) {
  const unsigned mask = m.mask.load(kRelaxed);
  if (mask == 0 || m.complete.load(kRelaxed)) return false;
  const unsigned arrived = m.arrived.load(kAcquire);
  const unsigned need = mask & w.existing & ~w.left.load(kRelaxed);
  if ((arrived & need) != need) return false;
  m.participants.store(arrived, kRelaxed);
  const unsigned self = self_lane >= 0 ? 1u << self_lane : 0u;
  b.running.fetch_add(__builtin_popcount(arrived & ~self), kRelaxed);
  m.complete.store(1, kRelease);
  FutexWakeAll(&m.complete);
  g_progress.fetch_add(1, kRelaxed);
  return true;
}

// A meeting of the lanes a partial mask names.
uint64_t MeetSubset(ThreadCtx* ctx, Warp& w, const WarpSlot& slot) {
  Block& b = *ctx->block;
  const unsigned bit = 1u << ctx->lane;
  Meeting* m = nullptr;
  bool met;
  {
    std::lock_guard<HiddenLock> lock(w.meetings_lock);
    for (Meeting& candidate : w.meetings) {
      if (candidate.mask.load(kRelaxed) == slot.mask &&
          !candidate.complete.load(kRelaxed) &&
          !(candidate.arrived.load(kRelaxed) & bit)) {
        m = &candidate;
        break;
      }
    }
    if (m == nullptr) {
      for (Meeting& candidate : w.meetings) {
        if (candidate.mask.load(kRelaxed) == 0) {
          m = &candidate;
          m->mask.store(slot.mask, kRelaxed);
          break;
        }
      }
    }
    m->slots[ctx->lane] = slot;
    m->arrived.fetch_or(bit, kAcqRel);
    met = TryComplete(b, w, *m, ctx->lane);
  }
  if (!met) WaitWhile(ctx, &m->complete, 0);
  m->complete.load(kAcquire);  // the edge from the completer
  const unsigned participants = m->participants.load(kRelaxed);
  const uint64_t result = MeetingResult(ctx, m->slots, participants, ctx->lane);
  std::lock_guard<HiddenLock> lock(w.meetings_lock);
  if (m->readers_done.fetch_add(1, kRelaxed) + 1 ==
      __builtin_popcount(participants)) {
    m->readers_done.store(0, kRelaxed);
    m->arrived.store(0, kRelaxed);
    m->complete.store(0, kRelaxed);
    m->mask.store(0, kRelaxed);
  }
  return result;
}

// ------------------------------------------------------------ the pool ----

void RunThread(Pool& pool, Worker& w) {
  ThreadCtx& c = w.ctx;
  Block& b = pool.block;
  const LaunchInfo& l = *pool.launch;
  c.block = &b;
  c.tid = w.index;
  c.lane = w.index % kWarp;
  c.warp = w.index / kWarp;
  c.block_seq = 0;
  c.has_report = false;
  c.errors.clear();
  const unsigned t = static_cast<unsigned>(w.index);
  threadIdx = {t % l.block.x, t / l.block.x % l.block.y,
               t / (l.block.x * l.block.y)};
  blockIdx = b.idx;
  blockDim = l.block;
  gridDim = l.grid;
  c.state.store(kRunning, kRelaxed);
  const int why = sigsetjmp(c.jmp, 1);
  if (why == kNoJump) {
    if (!b.abort.load(kRelaxed)) {
      c.in_kernel = 1;
      l.body(l.closure);
      c.in_kernel = 0;
    }
  } else if (why == kFaulted) {
    c.AddError(Where(c) + ": " + c.fault +
               " (an illegal or misaligned memory access)");
  }
  if (c.has_report) c.AddError(Where(c) + ": " + c.report);
  // Leaving: the warp's meetings and the block's barrier count this thread
  // as arrived from now on.
  Warp& warp = b.warps[c.warp];
  c.state.store(kLeft, kRelaxed);
  {
    std::lock_guard<HiddenLock> lock(warp.meetings_lock);
    warp.left.fetch_or(1u << c.lane, kRelaxed);
    for (Meeting& m : warp.meetings) TryComplete(b, warp, m, -1);
  }
  Leave(b, warp.barrier);
  Leave(b, b.barrier);
  // The last one running, with threads still waiting: a deadlock.
  if (b.running.fetch_sub(1, kRelaxed) == 1 && !b.abort.load(kRelaxed) &&
      AnyWaiting(b)) {
    Deadlock(&c);
  }
  g_progress.fetch_add(1, kRelaxed);
}

void* WorkerMain(void* arg) {
  Worker& w = *static_cast<Worker*>(arg);
  Pool& pool = *g_pool;
  t_ctx = &w.ctx;
  // Its own signal stack, so that a kernel overflowing its stack is
  // reported, not fatal.
  stack_t ss = {};
  ss.ss_size = 64 * 1024;
  ss.ss_sp = std::malloc(ss.ss_size);
  sigaltstack(&ss, nullptr);
  std::atomic<uint32_t>& start = pool.start[w.index / kWarp];
  uint32_t seen = 0;
  uint64_t last_run = 0;  // the sequence number of the last block it ran
  for (;;) {
    uint32_t now;
    while ((now = start.load(kAcquire)) == seen) FutexWait(&start, seen, -1);
    seen = now;
    if (pool.shutdown.load(kAcquire)) break;
    // The acquire: the edge from the launching host code.
    const uint64_t ticket = pool.ticket.load(kAcquire);
    const uint64_t seq = ticket >> 32;
    const uint32_t active = static_cast<uint32_t>(ticket);
    if (seq == last_run || static_cast<uint32_t>(w.index) >= active) continue;
    last_run = seq;
    RunThread(pool, w);
    if (pool.block.finished.fetch_add(1, kAcqRel) + 1 == active) {
      pool.done.fetch_add(1, kRelease);
      FutexWakeAll(&pool.done);
    }
  }
  return nullptr;
}

struct sigaction g_previous[NSIG];

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
  }
  return "a signal";
}

// A fault in a kernel unwinds its thread and becomes the launch's error;
// elsewhere the handler that was there before (a sanitizer's) or the
// default takes it.
void OnFault(int sig, siginfo_t* info, void* context) {
  ThreadCtx* c = t_ctx;
  if (c != nullptr && c->in_kernel) {
    snprintf(c->fault, sizeof(c->fault), "%s at address %p", SignalName(sig),
             info->si_addr);
    Unwind(c, kFaulted);
  }
  const struct sigaction& old = g_previous[sig];
  if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction != nullptr) {
    old.sa_sigaction(sig, info, context);
  } else if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN &&
             old.sa_handler != nullptr) {
    old.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);  // the fault repeats on return and kills
  }
}

void OnSanitizerDeath() {
  const LaunchInfo* l = g_running.load(kAcquire);
  if (l != nullptr) {
    std::fprintf(stderr, "CUDA-on-CPU: the program died while running %s\n",
                 Describe(*l).c_str());
  }
}

Pool& GetPool() {
  if (g_pool == nullptr) {
    g_pool = new Pool();
    for (auto& s : g_pool->start) s.store(0, kRelaxed);
    struct sigaction sa = {};
    sa.sa_sigaction = OnFault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
      sigaction(sig, &sa, &g_previous[sig]);
    }
    if (__sanitizer_set_death_callback != nullptr) {
      __sanitizer_set_death_callback(OnSanitizerDeath);
    }
  }
  return *g_pool;
}

void EnsureWorkers(Pool& pool, uint32_t n) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 2u << 20);
  while (pool.workers.size() < n) {
    auto w = std::make_unique<Worker>();
    w->index = static_cast<int>(pool.workers.size());
    Worker* raw = w.get();
    pool.workers.push_back(std::move(w));
    if (pthread_create(&raw->thread, &attr, WorkerMain, raw) != 0) {
      std::fprintf(stderr, "CUDA-on-CPU: cannot create thread %d\n",
                   raw->index);
      std::abort();
    }
  }
  pthread_attr_destroy(&attr);
}

double HangSeconds() {
  const char* s = std::getenv("CUDA_ON_CPU_HANG_SECONDS");
  return s != nullptr && std::atof(s) > 0 ? std::atof(s) : 300.0;
}

// Runs one block: wakes its threads and sleeps until the last has left. A
// block that makes no progress for HangSeconds() (a thread in a loop that
// never ends, or spinning on memory another thread should write: threads
// are not preempted in any particular order) stops the program.
void RunBlock(Pool& pool, uint3 idx) {
  Block& b = pool.block;
  const LaunchInfo& l = *pool.launch;
  const uint32_t n = l.block.x * l.block.y * l.block.z;
  b.idx = idx;
  b.nthreads = n;
  b.barrier.Reset(n);
  const uint32_t warps = (n + kWarp - 1) / kWarp;
  for (uint32_t i = 0; i < warps; ++i) {
    Warp& w = b.warps[i];
    w.lanes = std::min<uint32_t>(kWarp, n - i * kWarp);
    w.existing = w.lanes == kWarp ? ~0u : (1u << w.lanes) - 1u;
    w.barrier.Reset(w.lanes);
    w.left.store(0, kRelaxed);
    for (Meeting& m : w.meetings) {
      m.mask.store(0, kRelaxed);
      m.arrived.store(0, kRelaxed);
      m.complete.store(0, kRelaxed);
      m.readers_done.store(0, kRelaxed);
    }
  }
  b.abort.store(false, kRelaxed);
  b.early_exit_reported.store(false, kRelaxed);
  b.running.store(n, kRelaxed);
  b.finished.store(0, kRelaxed);
  for (uint32_t i = 0; i < n; ++i) Ctx(i).state.store(kIdle, kRelaxed);
  g_stats.blocks.fetch_add(1, kRelaxed);
  g_stats.threads.fetch_add(n, kRelaxed);
  // Read before the ticket: a worker that took it early (woken by an
  // earlier bump) may finish the block before the bumps below.
  const uint32_t done = pool.done.load(kRelaxed);
  const uint64_t seq = (pool.ticket.load(kRelaxed) >> 32) + 1;
  pool.ticket.store(seq << 32 | n, kRelease);
  for (uint32_t i = 0; i < warps; ++i) {
    pool.start[i].fetch_add(1, kRelease);
    FutexWakeAll(&pool.start[i]);
  }
  uint64_t last = g_progress.load(kRelaxed);
  Clock::time_point since = Clock::now();
  const double limit = HangSeconds();
  while (pool.done.load(kAcquire) == done) {
    FutexWait(&pool.done, done, 1000);
    const uint64_t p = g_progress.load(kRelaxed);
    if (p != last) {
      last = p;
      since = Clock::now();
    } else if (std::chrono::duration<double>(Clock::now() - since).count() >
               limit) {
      std::fprintf(stderr,
                   "CUDA-on-CPU: %s: block (%u,%u,%u) made no progress for "
                   "%.0f s (a thread in a loop that never ends, or spinning "
                   "on memory another thread should write): %s\n",
                   Describe(l).c_str(), idx.x, idx.y, idx.z, limit,
                   StuckThreads(b).c_str());
      std::abort();
    }
  }
  b.finished.load(kAcquire);  // the edges from every thread's leaving
}

}  // namespace

// ------------------------------------------------------------ interface ---

void RunKernel(const LaunchSite& site, const char* signature,
               const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
               cudaStream_t, ThreadBody body, const void* closure) {
  LaunchInfo l;
  l.site = site;
  // "... [with P = {A, B}]" (GCC) or "... [P = <A, B>]" (clang): the list.
  l.signature = signature;
  const size_t at = l.signature.find("P = ");
  if (at != std::string::npos) {
    l.signature = l.signature.substr(at + 4);
    if (!l.signature.empty() && l.signature.back() == ']') {
      l.signature.pop_back();
    }
  }
  l.grid = grid;
  l.block = block;
  l.shared_bytes = shared_bytes;
  l.body = body;
  l.closure = closure;
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  std::string bad;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    bad = "an empty grid or block";
  } else if (threads > kMaxThreadsPerBlock) {
    bad = Format("%llu threads per block, more than %d",
                 static_cast<unsigned long long>(threads),
                 kMaxThreadsPerBlock);
  } else if (block.x > 1024 || block.y > 1024 || block.z > 64) {
    bad = "a block dimension past (1024, 1024, 64)";
  } else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    bad = "a grid dimension past (2^31 - 1, 65535, 65535)";
  } else if (shared_bytes > MaxDynamicShared(kernel)) {
    bad = Format("%zu bytes of dynamic shared memory, more than the %zu "
                 "allowed (cudaFuncSetAttribute raises it)",
                 shared_bytes, MaxDynamicShared(kernel));
  }
  if (!bad.empty()) {
    const std::string message =
        "CUDA-on-CPU: invalid launch configuration (" + bad + ") of " +
        Describe(l);
    std::fprintf(stderr, "%s\n", message.c_str());
    RecordError(cudaErrorInvalidConfiguration, message);
    return;
  }
  Pool& pool = GetPool();
  EnsureWorkers(pool, static_cast<uint32_t>(threads));
  const Clock::time_point started = Clock::now();
  g_stats.launches.fetch_add(1, kRelaxed);
  // Exactly the bytes asked for, so that AddressSanitizer sees an overrun.
  l.dynamic_shared = std::malloc(shared_bytes);
  if (shared_bytes > 0) std::memset(l.dynamic_shared, 0xff, shared_bytes);
  pool.launch = &l;
  pool.block.launch = &l;
  g_running.store(&l, kRelease);
  std::vector<std::string> errors;
  int error_count = 0;
  for (unsigned z = 0; z < grid.z && error_count == 0; ++z) {
    for (unsigned y = 0; y < grid.y && error_count == 0; ++y) {
      for (unsigned x = 0; x < grid.x && error_count == 0; ++x) {
        RunBlock(pool, {x, y, z});
        for (uint64_t i = 0; i < threads; ++i) {
          for (const std::string& e : pool.workers[i]->ctx.errors) {
            if (++error_count <= 3) errors.push_back(e);
          }
        }
      }
    }
  }
  g_running.store(nullptr, kRelease);
  std::free(l.dynamic_shared);
  g_stats.kernel_ns.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() -
                                                           started)
          .count(),
      kRelaxed);
  if (error_count > 0) {
    std::string message = "CUDA-on-CPU: " + errors.front();
    for (size_t i = 1; i < errors.size(); ++i) message += "; also: " + errors[i];
    if (error_count > static_cast<int>(errors.size())) {
      message += Format(" (and %d more errors)",
                        error_count - static_cast<int>(errors.size()));
    }
    message += "; in " + Describe(l);
    std::fprintf(stderr, "%s\n", message.c_str());
    RecordError(cudaErrorLaunchFailure, message);
  }
}

void SyncThreads(const char* file, int line) {
  ThreadCtx* ctx = CurrentThread("__syncthreads");
  Block& b = *ctx->block;
  SetWaiting(ctx, kAtSyncthreads, "__syncthreads", file, line);
  Arrive(ctx, b.barrier, [](int) {});
  ctx->state.store(kRunning, kRelaxed);
  const uint32_t left = b.barrier.left_at_open;
  if (ctx->tid == 0) g_stats.barriers.fetch_add(1, kRelaxed);
  if (left > 0 && !b.abort.load(kRelaxed) &&
      !b.early_exit_reported.exchange(true, kRelaxed)) {
    ctx->AddError(Format(
        "__syncthreads at %s:%d opened with %u of the block's %u threads "
        "gone (they left the kernel first): a barrier every thread must "
        "reach is undefined behaviour when some return early",
        ShortPath(file), line, left, b.nthreads));
  }
}

int SyncThreadsReduce(int predicate, int op, const char* file, int line) {
  ThreadCtx* ctx = CurrentThread("__syncthreads_count/and/or");
  Block& b = *ctx->block;
  const int parity = ctx->block_seq++ & 1;
  b.reduce[parity][ctx->tid] = predicate != 0;
  SyncThreads(file, line);
  int count = 0;
  for (uint32_t i = 0; i < b.nthreads; ++i) count += b.reduce[parity][i];
  switch (op) {
    case 0: return count;
    case 1: return count == static_cast<int>(b.nthreads);
    default: return count > 0;
  }
}

uint64_t WarpCollective(WarpOp op, unsigned mask, uint64_t value, int arg,
                        int width, const char* file, int line) {
  ThreadCtx* ctx = CurrentThread(OpName(op));
  Block& b = *ctx->block;
  Warp& w = b.warps[ctx->warp];
  const unsigned bit = 1u << ctx->lane;
  if (!(mask & bit)) {
    ctx->AddError(Format("%s: %s at %s:%d with mask 0x%08x, which leaves out "
                         "the calling lane %d",
                         Where(*ctx).c_str(), OpName(op), ShortPath(file),
                         line, mask, ctx->lane));
    mask |= bit;
  }
  if (width < 1 || width > kWarp || (width & (width - 1)) != 0) {
    ctx->AddError(Format("%s: %s at %s:%d with width %d (a power of two up "
                         "to 32 is required)",
                         Where(*ctx).c_str(), OpName(op), ShortPath(file),
                         line, width));
    width = kWarp;
  }
  const WarpSlot slot = {value, mask, op, arg, width, file, line};
  SetWaiting(ctx, kAtWarp, OpName(op), file, line);
  uint64_t result;
  if ((mask & w.existing) == w.existing) {
    // Every live lane of the warp: its barrier, with slots double-buffered
    // by the generation's parity (a lane writes parity p again only after
    // every lane passed the next meeting, so after each has read this one).
    const int lane = ctx->lane;
    const int parity = Arrive(ctx, w.barrier, [&](int p) {
                         w.slots[p][lane] = slot;
                         w.barrier.arrived_mask[p].fetch_or(bit, kRelaxed);
                       }) &
                       1;
    result = MeetingResult(ctx, w.slots[parity],
                           w.barrier.participants[parity], lane);
    if (lane == 0) g_stats.meetings.fetch_add(1, kRelaxed);
  } else {
    result = MeetSubset(ctx, w, slot);
  }
  ctx->state.store(kRunning, kRelaxed);
  return result;
}

unsigned ActiveMask() {
  ThreadCtx* ctx = CurrentThread("__activemask");
  const Warp& w = ctx->block->warps[ctx->warp];
  return w.existing & ~w.left.load(kRelaxed);
}

void* DynamicShared() {
  return CurrentThread("dynamic shared memory")->block->launch->dynamic_shared;
}

void Trap(const char* file, int line) {
  ThreadCtx* ctx = CurrentThread("__trap");
  ctx->AddError(Where(*ctx) +
                Format(": __trap() at %s:%d", ShortPath(file), line));
  Unwind(ctx, kTrapped);
}

std::atomic<int> g_host_reports{0};

void NoteSanitizerReport(const char* summary) {
  ThreadCtx* c = t_ctx;
  if (c != nullptr && c->in_kernel) {
    if (!c->has_report) {
      snprintf(c->report, sizeof(c->report), "%s", summary);
      c->has_report = true;
    }
    return;
  }
  g_host_reports.fetch_add(1, kRelaxed);
}

int HostSanitizerReports() { return g_host_reports.load(kRelaxed); }

const char* ShortPath(const char* path) {
  if (path == nullptr) return "?";
  const char* best = path;
  for (const char* marker : {"/tf_ops/", "/tests/"}) {
    for (const char* at = std::strstr(path, marker); at != nullptr;
         at = std::strstr(at + 1, marker)) {
      if (at + 1 > best) best = at + 1;
    }
  }
  return best;
}

}  // namespace cuda_on_cpu
