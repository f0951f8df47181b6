// The CPU kernels' one way to use several cores: parallel_for over chunks fixed by the problem size.
//
//   parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) { ... items [begin, end) ... });
//
// [0, n) is cut into chunks_of(n, grain): as many nearly equal chunks as hold `grain` items each, at
// most kMaxChunks. That cut depends on n and grain alone, never on the thread count; the pool's
// threads (kernels/threads.h) then take whole chunks in any order. So a kernel whose chunks write
// disjoint outputs, or whose per-chunk partial results are combined in chunk order afterwards (a
// sum: for_each_chunk), computes the same bits with 1 thread or 16. What it costs: a loop is cut
// the same way on 1 thread too, so a reduction always pays for combining its partial sums and a
// GEMM for repacking the operand its tiles share (kernels/cpu/gemm.cpp).
//
// `grain` is the smallest chunk worth a thread (~10-50 us of work): below 2 * grain the body runs
// at once on the caller's thread, with no synchronisation at all. A kernel called from inside a
// chunk (nested parallelism) runs its loop serially on that thread: same chunks, same results.
// If the body throws, the first exception is rethrown by parallel_for once every chunk has ended.
// Its tests: build/tests/test_threads.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mg::kernels::cpu {

// The most chunks a loop is cut into, and so the most threads that can help one loop.
inline constexpr std::int64_t kMaxChunks = 64;

// [0, n) in `count` nearly equal chunks; chunk i is [begin(i), end(i)).
struct Chunks {
  std::int64_t n = 0;
  std::int64_t count = 0;
  std::int64_t begin(std::int64_t chunk) const { return n * chunk / count; }
  std::int64_t end(std::int64_t chunk) const { return n * (chunk + 1) / count; }
};

inline Chunks chunks_of(std::int64_t n, std::int64_t grain) {
  if (n <= 0) return {};
  return {n, std::clamp<std::int64_t>(n / std::max<std::int64_t>(grain, 1), 1, kMaxChunks)};
}

// A non-owning reference to a callable `void(std::int64_t chunk)`: what the pool runs.
struct ChunkBody {
  const void* callable;
  void (*call)(const void* callable, std::int64_t chunk);
  void operator()(std::int64_t chunk) const { call(callable, chunk); }
};

// The default thread count: the value of MG_NUM_THREADS when set and not empty (a whole number from
// 1 to 1024, else an mg::Error that says so), else the cores this process may run on.
int thread_count_from(const char* mg_num_threads);

// Runs body(chunk) for every chunk in [0, count) on the pool and the calling thread; returns when
// all have run.
void run_chunks(std::int64_t count, ChunkBody body);

// body(chunk, begin, end) for every chunk of `chunks`, in parallel.
template <class Body>
void for_each_chunk(const Chunks& chunks, const Body& body) {
  if (chunks.count == 1) return body(std::int64_t{0}, std::int64_t{0}, chunks.n);
  auto one = [&](std::int64_t chunk) { body(chunk, chunks.begin(chunk), chunks.end(chunk)); };
  run_chunks(chunks.count,
             {&one, [](const void* f, std::int64_t chunk) { (*static_cast<const decltype(one)*>(f))(chunk); }});
}

// body(begin, end) over the chunks of [0, n), in parallel.
template <class Body>
void parallel_for(std::int64_t n, std::int64_t grain, const Body& body) {
  for_each_chunk(chunks_of(n, grain), [&](std::int64_t, std::int64_t begin, std::int64_t end) { body(begin, end); });
}

}  // namespace mg::kernels::cpu
