// How many CPU threads mixgrad's CPU kernels use: the public switch (PyTorch's torch::set_num_threads).
//
// The CPU backend splits its loops (GEMM tiles, elementwise chunks, rows of a softmax, images of an
// im2col, partial sums of a reduction) into chunks fixed by the problem's size alone, and a pool of
// threads takes the chunks in any order (kernels/cpu/parallel.h). So a result never depends on the
// thread count: a run with 1 thread and with 16 is bit-identical, and a checkpoint resumes the same
// on any machine. The thread count only changes how fast.
#pragma once

namespace mg {

// Uses `threads` threads (the caller's and threads - 1 workers) from the next kernel on. Requires
// threads >= 1, else an mg::Error. The default is the MG_NUM_THREADS environment variable if set,
// else the number of cores this process may run on (its CPU affinity, so `taskset` and container
// limits count).
void set_num_threads(int threads);

// The thread count in use (reads MG_NUM_THREADS on first call: an mg::Error names a bad value).
int num_threads();

}  // namespace mg
