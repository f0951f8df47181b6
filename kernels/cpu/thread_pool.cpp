// The CPU thread pool behind parallel_for (kernels/cpu/parallel.h) and mg::set_num_threads
// (kernels/threads.h).
//
// Why a small pool of std::jthread and not OpenMP: the chunks must be fixed by the problem, not by
// the threads (that is what makes results independent of the thread count), and OpenMP's schedules
// are cut by thread count; a hand-written pool also keeps OpenMP's runtime out of a process that
// may load OpenBLAS's own threads, and it reads in one screen.
//
// How a loop runs: the caller publishes a Job (the chunk count and the body), wakes the workers and
// works on the job itself. Every thread takes the next chunk index from one atomic counter until
// none is left. The caller returns once every chunk has ended and no worker still holds the job (it
// lives on the caller's stack). Workers spin briefly before sleeping, because a training step runs
// loops back to back and a sleeping thread takes tens of microseconds to wake.
// One job runs at a time: a second thread calling a kernel meanwhile, or a kernel called from inside
// a chunk, runs its chunks itself, serially (same chunks, same results).
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/threads.h"

namespace mg::kernels::cpu {

int thread_count_from(const char* mg_num_threads) {
  if (mg_num_threads && *mg_num_threads) {
    char* end = nullptr;
    const long value = std::strtol(mg_num_threads, &end, 10);
    MG_CHECK(*end == '\0' && value >= 1 && value <= 1024,
             "MG_NUM_THREADS={:?} is not a thread count: set it to a whole number from 1 to 1024, or unset it "
             "to use every core this process may run on",
             mg_num_threads);
    return static_cast<int>(value);
  }
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof(cores), &cores) == 0) return std::max(1, CPU_COUNT(&cores));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

// How long an idle worker polls for the next job before it sleeps: ~20-50 us of pause instructions.
constexpr int kSpinIterations = 2000;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

thread_local bool inside_chunk = false;  // this thread is running a chunk: nested loops run serially

struct Job {
  Job(std::int64_t chunk_count, ChunkBody chunk_body) : count(chunk_count), body(chunk_body) {}
  std::int64_t count;
  ChunkBody body;
  std::atomic<std::int64_t> next{0};  // the next chunk to take
  std::atomic<std::int64_t> finished{0};  // chunks that have ended
  std::mutex error_mutex;
  std::exception_ptr error;  // the first exception a chunk threw

  void work() {
    inside_chunk = true;
    for (std::int64_t chunk; (chunk = next.fetch_add(1, std::memory_order_relaxed)) < count;) {
      try {
        body(chunk);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
      finished.fetch_add(1, std::memory_order_release);
    }
    inside_chunk = false;
  }
};

void run_serially(std::int64_t count, ChunkBody body) {
  for (std::int64_t chunk = 0; chunk < count; ++chunk) body(chunk);
}

class ThreadPool {
 public:
  ThreadPool() { start(thread_count_from(std::getenv("MG_NUM_THREADS"))); }
  ~ThreadPool() { stop(); }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int threads) {
    std::lock_guard submit(submit_mutex_);  // no job is running while the workers change
    stop();
    start(threads);
  }

  void run(std::int64_t count, ChunkBody body) {
    if (count <= 1 || inside_chunk) return run_serially(count, body);
    std::unique_lock submit(submit_mutex_, std::try_to_lock);
    // Another thread's job is running (or set_num_threads is changing the workers): run it here.
    if (!submit.owns_lock() || workers_.empty()) return run_serially(count, body);

    Job job{count, body};
    {
      std::lock_guard lock(mutex_);
      job_ = &job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    job.work();
    // Wait for the chunks the workers took, then for every worker to let go of the job.
    for (int spin = 0; spin < kSpinIterations && !job_done(job); ++spin) cpu_relax();
    {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [&] { return job_done(job); });
      job_ = nullptr;
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  bool job_done(const Job& job) const {
    return job.finished.load(std::memory_order_acquire) == job.count && busy_.load(std::memory_order_acquire) == 0;
  }

  void start(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this](std::stop_token stop) { work(stop); });
  }

  void stop() {
    for (auto& worker : workers_) worker.request_stop();
    wake_.notify_all();
    workers_.clear();  // joins
  }

  void work(std::stop_token stop) {
    std::uint64_t seen = generation_.load(std::memory_order_acquire);
    while (!stop.stop_requested()) {
      for (int spin = 0; spin < kSpinIterations && generation_.load(std::memory_order_acquire) == seen; ++spin)
        cpu_relax();
      Job* job;
      {
        std::unique_lock lock(mutex_);
        if (!wake_.wait(lock, stop, [&] { return generation_.load(std::memory_order_relaxed) != seen; })) return;
        seen = generation_.load(std::memory_order_relaxed);
        job = job_;
        if (!job) continue;  // that job ended before this worker woke
        busy_.fetch_add(1, std::memory_order_relaxed);
      }
      job->work();
      {
        std::lock_guard lock(mutex_);
        busy_.fetch_sub(1, std::memory_order_release);
      }
      done_.notify_all();
    }
  }

  std::mutex submit_mutex_;  // one job at a time
  std::mutex mutex_;  // guards job_ and the sleeping/waking
  std::condition_variable_any wake_;
  std::condition_variable done_;
  std::atomic<std::uint64_t> generation_{0};  // +1 per job: what a worker waits to change
  Job* job_ = nullptr;  // the running job, or none
  std::atomic<int> busy_{0};  // workers holding job_
  std::vector<std::jthread> workers_;
};

ThreadPool& pool() {
  static ThreadPool instance;
  return instance;
}

}  // namespace

void run_chunks(std::int64_t count, ChunkBody body) { pool().run(count, body); }

}  // namespace mg::kernels::cpu

namespace mg {

void set_num_threads(int threads) {
  MG_CHECK(threads >= 1 && threads <= 1024,
           "set_num_threads: got {}; pass a thread count from 1 to 1024 (1 runs every CPU kernel on the "
           "calling thread)",
           threads);
  kernels::cpu::pool().resize(threads);
}

int num_threads() { return kernels::cpu::pool().threads(); }

}  // namespace mg
