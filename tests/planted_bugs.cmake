# Planted bugs: proof that the GPU suites, run on the CUDA emulator, catch the bugs they exist for.
#
# Each mg_planted_bug() copies one source of kernels/cuda/ with one known bug planted in it (FIND
# replaced by REPLACE; FIND must occur exactly once, or configuring fails and says to update this
# file), compiles the kernel translation unit COMPILE against that copy into planted_<name>, together
# with the GPU suite SUITE, and registers a ctest test that runs the suite's CASES and passes only
# when the output shows the bug caught the way CATCHES says:
#   wrong values        a doctest check failed (the GPU result is not the CPU's)
#   a race              the emulator's race check: two schedules left different bytes
#   AddressSanitizer    an out-of-bounds access (ASAN_ONLY: registered in sanitizer builds only,
#                       since without AddressSanitizer the access goes unseen or corrupts the heap)
#   bank conflicts      tests/test_mma_layout.cpp's count of a block's shared-memory wavefronts
# A HOST bug is caught by a host suite: COMPILE is that suite (SUITE is unused), compiled as plain C++
# against the planted copy.
# The copy's symbols replace the library's: the linker takes them from the executable's own object
# and never pulls the original kernel file out of libmixgrad.a.
# Run them: ctest --test-dir build -R planted (kernels/cuda/README.md lists what catches each).

set(MG_PLANTED_DIR ${CMAKE_CURRENT_BINARY_DIR}/planted)

# Under the sanitizers (CI's pass 6) only the bugs AddressSanitizer catches are planted: the others are
# caught the same way by the optimised emulated pass (3), and each planted copy recompiles a kernel file
# under ASan (gemm_mma.cu: 50 s).

function(mg_planted_bug name)
  # PARSE_ARGV keeps the semicolons of C++ code (as \;, put back below).
  cmake_parse_arguments(PARSE_ARGV 1 P "ASAN_ONLY;HOST" "FILE;COMPILE;SUITE;CASES;CATCHES;FIND;REPLACE;ENVIRONMENT" "")
  string(REPLACE "\\;" ";" P_FIND "${P_FIND}")
  string(REPLACE "\\;" ";" P_REPLACE "${P_REPLACE}")
  if(P_ASAN_ONLY AND NOT MG_SANITIZE MATCHES "address")
    return()
  endif()
  if(MG_SANITIZE MATCHES "address" AND NOT P_CATCHES MATCHES "AddressSanitizer")
    return()
  endif()
  # The suite's test code, compiled once for all the planted executables that run it.
  if(NOT P_HOST AND NOT TARGET planted_${P_SUITE})
    add_library(planted_${P_SUITE} OBJECT ${P_SUITE}.cpp)
    target_link_libraries(planted_${P_SUITE} PUBLIC mg_test_main mixgrad doctest::doctest)
    target_precompile_headers(planted_${P_SUITE} REUSE_FROM test_dtype)
  endif()
  set(original ${PROJECT_SOURCE_DIR}/${P_FILE})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${original})
  file(READ ${original} text)
  string(FIND "${text}" "${P_FIND}" first)
  string(FIND "${text}" "${P_FIND}" last REVERSE)
  if(first EQUAL -1 OR NOT first EQUAL last)
    message(FATAL_ERROR "planted bug ${name}: the text to replace occurs ${first}/${last} (not exactly once) in "
                        "${P_FILE}; the kernel changed: update tests/planted_bugs.cmake")
  endif()
  string(REPLACE "${P_FIND}" "${P_REPLACE}" planted "${text}")
  set(dir ${MG_PLANTED_DIR}/${name})
  file(WRITE ${dir}/staging/planted.txt "${planted}")
  configure_file(${dir}/staging/planted.txt ${dir}/${P_FILE} COPYONLY)  # rewritten only when it changes

  if(P_COMPILE STREQUAL P_FILE)
    set(source ${dir}/${P_FILE})
  else()
    set(source ${PROJECT_SOURCE_DIR}/${P_COMPILE})  # it includes the planted copy, found first below
  endif()
  if(P_HOST)
    add_executable(planted_${name} ${source})
  else()
    add_executable(planted_${name} ${source} $<TARGET_OBJECTS:planted_${P_SUITE}>)
    # -O1, last on the line: the planted copy of a kernel file compiles in half the time of the
    # library's -O3 (gemm_mma.cu: 31 s against 60), and the few cases a planted bug runs are short.
    set_source_files_properties(${source} PROPERTIES LANGUAGE CXX SKIP_PRECOMPILE_HEADERS ON
                                COMPILE_OPTIONS "${MG_EMULATED_KERNEL_OPTIONS};-O1")
  endif()
  target_include_directories(planted_${name} BEFORE PRIVATE ${dir})
  target_link_libraries(planted_${name} PRIVATE mg_test_main mixgrad doctest::doctest)
  add_test(NAME planted_${name} COMMAND planted_${name} "--test-case=${P_CASES}")
  # Every schedule, whatever the pass runs its suites with: the race check is one of the catchers.
  set(environment "MG_EMULATOR_SCHEDULES=forward:issue,reverse:wait,random:wait")
  if(P_ENVIRONMENT)
    list(APPEND environment "${P_ENVIRONMENT}")
  endif()
  set_tests_properties(planted_${name} PROPERTIES PASS_REGULAR_EXPRESSION "${P_CATCHES}" ENVIRONMENT "${environment}")
endfunction()

set(wrong_values "ERROR: CHECK")
set(bank_conflicts "[1-9][0-9]* extra wavefronts")
set(a_race "CUDA emulator: .* a race: the result depends on the order")
set(asan "ERROR: AddressSanitizer")
set(gemm_f16 "cuda gemm: f16 and bf16 operands into f16?*")
set(gemm_wmma "cuda gemm: rungs 1 and 2*")  # the WMMA rungs run only when set_gemm_rung asks
set(gemm_f32 "cuda gemm: f32 on CUDA cores?*")

# The pipelined WMMA GEMM's stage loop without its barrier: a warp may read a stage before the
# others' copies have landed, and refill a stage another warp is still reading.
mg_planted_bug(pipelined_gemm_no_barrier FILE kernels/cuda/gemm_wmma.cuh COMPILE kernels/cuda/gemm.cu
  SUITE test_cuda_gemm CASES "${gemm_wmma}" CATCHES "${a_race}"
  FIND "    __syncthreads();  // everyone's are; and every warp is done with step - 1's stage\n"
  REPLACE "")
# The pipelined GEMM waiting for one cp.async group too few: the step's own copies may be in flight.
mg_planted_bug(pipelined_gemm_weak_wait FILE kernels/cuda/gemm_wmma.cuh COMPILE kernels/cuda/gemm.cu
  SUITE test_cuda_gemm CASES "${gemm_wmma}" CATCHES "${a_race}"
  FIND "wait_copies<kStages - 2>();" REPLACE "wait_copies<kStages - 1>();")
# The SIMT f32 GEMM without the barrier that ends a k step: the next slice is written while others
# still read the current one's neighbour.
mg_planted_bug(simt_gemm_no_barrier FILE kernels/cuda/gemm_f32.cuh COMPILE kernels/cuda/gemm.cu
  SUITE test_cuda_gemm CASES "${gemm_f32}" CATCHES "${a_race}"
  FIND "    }\n    __syncthreads();\n  }\n" REPLACE "    }\n  }\n")
# The simple WMMA GEMM without A's k edge: its last step reads A past the end of the matrix, where
# device memory holds NaN (AddressSanitizer: out of bounds), and NaN x 0 reaches C.
mg_planted_bug(simple_gemm_no_k_edge FILE kernels/cuda/gemm_wmma_simple.cuh COMPILE kernels/cuda/gemm.cu
  SUITE test_cuda_gemm CASES "${gemm_wmma}" CATCHES "${wrong_values}|${asan}"
  FIND "const bool inside = row < m && kg < k;" REPLACE "const bool inside = row < m;  // planted: no kg < k")
# The simple WMMA GEMM without A's m edge: rows past m are read (out of bounds) but only feed rows of
# C that are never stored, so no value shows it; AddressSanitizer does.
mg_planted_bug(simple_gemm_no_row_edge FILE kernels/cuda/gemm_wmma_simple.cuh COMPILE kernels/cuda/gemm.cu
  SUITE test_cuda_gemm CASES "${gemm_wmma}" CATCHES "${asan}"
  FIND "const bool inside = row < m && kg < k;" REPLACE "const bool inside = kg < k;  // planted: no row < m"
  ASAN_ONLY)
# The warp reduction without its last shuffle (offset 1): each lane sums half the warp.
mg_planted_bug(warp_reduction_missing_offset FILE kernels/cuda/reduce.cu COMPILE kernels/cuda/reduce.cu
  SUITE test_cuda_reduce CASES "cuda reduce: sum?*" CATCHES "${wrong_values}"
  FIND "for (int offset = 16; offset > 0; offset /= 2)\n    p = combine("
  REPLACE "for (int offset = 16; offset > 1; offset /= 2)\n    p = combine(")
# The SIMT GEMM storing rows past m: out of bounds of C.
mg_planted_bug(simt_gemm_no_row_edge FILE kernels/cuda/gemm_f32.cuh COMPILE kernels/cuda/gemm.cu
  SUITE test_cuda_gemm CASES "${gemm_f32}" CATCHES "${asan}"
  FIND "    if (row >= m) continue;\n" REPLACE "" ASAN_ONLY)
# The FP8 GEMM loading A's fragment with the wrong k half in registers 1 and 2 (the layout of
# mma_fp8.cuh's functions, which the emulator's instruction does not use): the products are wrong.
mg_planted_bug(fp8_fragment_layout FILE kernels/cuda/mma_fp8.cuh COMPILE kernels/cuda/gemm_fp8.cu
  SUITE test_cuda_fp8_gemm CASES "cuda fp8: the GEMM*" CATCHES "${wrong_values}"
  FIND "return 16 * (reg / 2) + 4 * (lane % 4) + byte;"
  REPLACE "return 16 * (reg % 2) + 4 * (lane % 4) + byte; /* planted: reg % 2 */")
# The FP8 GEMM never promoting its Tensor Core sums into f32: 13-bit sums over whole chunks, on an
# emulated Ada (Hopper's mma.sync sums in f32, where promotion changes nothing).
mg_planted_bug(fp8_gemm_no_promotion FILE kernels/cuda/gemm_fp8.cu COMPILE kernels/cuda/gemm_fp8.cu
  SUITE test_cuda_fp8_gemm CASES "cuda fp8: the accumulator*" CATCHES "${wrong_values}"
  ENVIRONMENT "MG_EMULATOR_COMPUTE_CAPABILITY=89"
  FIND "        for (int e = 0; e < 4; ++e) promoted.x[e] += running.x[e], running.x[e] = 0.0f;"
  REPLACE "        (void)0;  // planted: no promotion")
# Rung 3 (gemm_mma.cu, mma_layout.h). Its swizzle with one bit fewer (chunk ^ (row % 4)): still a
# permutation of each tile, so every value stays right, but the 8 rows an ldmatrix reads share banks.
mg_planted_bug(mma_swizzle_bit FILE kernels/cuda/mma_layout.h COMPILE tests/test_mma_layout.cpp HOST
  CASES "*no bank conflict*" CATCHES "${bank_conflicts}"
  FIND "using Swizzle128B = Swizzle<3, 4, 3>;" REPLACE "using Swizzle128B = Swizzle<2, 4, 3>;  // planted")
# Its K-major B fragment with the k halves taken from the wrong lanes (lane / 16, which picks the n
# half): registers 1 and 2 swap matrices, and the emulator's mma.sync, which reads the fragments with
# the PTX ISA's formulas, multiplies the wrong elements.
mg_planted_bug(mma_fragment_half FILE kernels/cuda/mma_layout.h COMPILE kernels/cuda/gemm_mma.cu
  SUITE test_cuda_gemm CASES "${gemm_f16}" CATCHES "${wrong_values}"
  FIND "return {lane % 8 + 8 * (lane / 16), ((lane / 8) % 2) * (kChunkBytes / element_bytes)};"
  REPLACE "return {lane % 8 + 8 * (lane / 16), (lane / 16) * (kChunkBytes / element_bytes)};  // planted")
# Its stage wait one group too weak: substep 3 loads the next step's fragments before they landed.
mg_planted_bug(mma_weak_wait FILE kernels/cuda/gemm_mma.cu COMPILE kernels/cuda/gemm_mma.cu
  SUITE test_cuda_gemm CASES "${gemm_f16}" CATCHES "${a_race}"
  FIND "wait_copies<Cfg::kStages - 2>();  // this thread's copies of step + 1 have landed,"
  REPLACE "wait_copies<Cfg::kStages - 1>();  // planted: one group too weak")
# Its epilogue without the __syncwarp between staging and reading: a lane reads sums another lane of
# its warp has not staged yet (the emulator runs lanes one after another: NaN from the arena).
mg_planted_bug(mma_epilogue_no_syncwarp FILE kernels/cuda/mma_epilogue.cuh COMPILE kernels/cuda/gemm_mma.cu
  SUITE test_cuda_gemm CASES "${gemm_f16}" CATCHES "${a_race}"
  FIND "  __syncwarp();  // the warp's sums are staged\n" REPLACE "")
# Rung 3 of the FP8 GEMM (gemm_fp8_mma.cu) chaining its instructions through the lane's sums instead of
# starting each from 0 and promoting its result: the 13-bit accumulator of an emulated Ada cuts the
# running sums.
mg_planted_bug(fp8_mma_no_promotion FILE kernels/cuda/gemm_fp8_mma.cu COMPILE kernels/cuda/gemm_fp8_mma.cu
  SUITE test_cuda_fp8_gemm CASES "*rung 3 (K-major)*" CATCHES "${wrong_values}"
  ENVIRONMENT "MG_EMULATOR_COMPUTE_CAPABILITY=89"
  FIND "mma_fp8<kA, kB>(group, a[i], bj, zero);  // one instruction's 32 products, from 0\n#pragma unroll\n                for (int r = 0; r < 4; ++r) promoted[i][j].x[r] += group.x[r];"
  REPLACE "mma_fp8<kA, kB>(group, a[i], bj, Fp8FragmentC{{promoted[i][j].x[0], promoted[i][j].x[1], promoted[i][j].x[2], promoted[i][j].x[3]}});\n                for (int r = 0; r < 4; ++r) promoted[i][j].x[r] = group.x[r];  // planted: chained")


# Rung 3's chunks (block and MX scales) all scaled by the first chunk's scales.
mg_planted_bug(fp8_mma_first_chunk_scales FILE kernels/cuda/gemm_fp8_mma.cu COMPILE kernels/cuda/gemm_fp8_mma.cu
  SUITE test_cuda_fp8_gemm CASES "*rung 3 (K-major)*" CATCHES "${wrong_values}"
  FIND "const float* scale_a = sa.scale_inv + g / sa.block_k;"
  REPLACE "const float* scale_a = sa.scale_inv;  // planted: the first chunk's")

# Rung 3's FP4 copies (gemm_mma.cu's Fp4Chunks) decoding every chunk of a row with its first block's
# scale: fp4_gemm's values against the CPU's.
mg_planted_bug(fp4_mma_first_block_scale FILE kernels/cuda/gemm_mma.cu COMPILE kernels/cuda/gemm_mma.cu
  SUITE test_cuda_fp4_quantize CASES "*fp4_gemm*" CATCHES "${wrong_values}"
  FIND "s.scales[x / s.block_rows * s.scale_cols + k / s.block_cols]"
  REPLACE "s.scales[x / s.block_rows * s.scale_cols]  /* planted: the row's first block */")

# Rung 3's carried accumulator never promoted (a Limited accumulator promoted every 64 or 128 products
# summed as if never): on an emulated Ada the 13-bit running sums lose what promotion keeps.
mg_planted_bug(fp8_mma_carried_never_promoted FILE kernels/cuda/gemm_fp8_mma.cu COMPILE kernels/cuda/gemm_fp8_mma.cu
  SUITE test_cuda_fp8_gemm CASES "*rung 3 (K-major)*" CATCHES "${wrong_values}"
  ENVIRONMENT "MG_EMULATOR_COMPUTE_CAPABILITY=89"
  FIND "if (args.promote_every > 0 && end % args.promote_every == 0) promote<Cfg>(promoted, running);"
  REPLACE "if (false) promote<Cfg>(promoted, running);  // planted: never")
# Rung 4 (gemm_wgmma.cu, sm_90a), one bug a mechanism: each is caught on the emulator's model of the
# async machinery (emulator/README.md, "Hopper"), on an emulated GPU of 4 SMs, where a block walks
# several tiles (the phases carried from tile to tile, the staging reused).
set(gemm_wgmma "cuda gemm: rung 4 (wgmma*")
set(few_sms "MG_EMULATOR_MULTIPROCESSORS=4")
# A consumer waiting for the stage's full barrier on the wrong parity: the wait returns before TMA's
# bytes land (under ":wait" the stage reads as poison), and the consumers run ahead of the producer.
mg_planted_bug(wgmma_barrier_phase FILE kernels/cuda/gemm_wgmma.cu COMPILE kernels/cuda/gemm_wgmma.cu
  SUITE test_cuda_gemm CASES "${gemm_wgmma}" CATCHES "${wrong_values}|${a_race}|deadlock" ENVIRONMENT "${few_sms}"
  FIND "hopper::mbarrier_wait(&full[stage], ring.phase);"
  REPLACE "hopper::mbarrier_wait(&full[stage], ring.phase ^ 1);  // planted: the wrong parity")
# The epilogue's staging stores not fenced before TMA reads them: the async proxy sees the staging as
# it was before (poison at first, the previous tile's sums after).
mg_planted_bug(wgmma_no_proxy_fence FILE kernels/cuda/wgmma_pipeline.cuh COMPILE kernels/cuda/gemm_wgmma.cu
  SUITE test_cuda_gemm CASES "${gemm_wgmma}" CATCHES "${wrong_values}|${a_race}" ENVIRONMENT "${few_sms}"
  FIND "  hopper::fence_proxy_async();  // the staging stores, visible to TMA\n" REPLACE "")
# A K-major descriptor's stride (SBO) half the 8 rows of 128 bytes TMA wrote: rows 8 to 15 of each
# group of 16 read rows that belong to others.
mg_planted_bug(wgmma_descriptor_stride FILE kernels/cuda/wgmma_layout.h COMPILE kernels/cuda/gemm_wgmma.cu
  SUITE test_cuda_gemm CASES "${gemm_wgmma}" CATCHES "${wrong_values}" ENVIRONMENT "${few_sms}"
  FIND "return {tile + static_cast<std::uint32_t>(step * kInstructionK), 16, kAtomBytes, Swizzle::B128};"
  REPLACE "return {tile + static_cast<std::uint32_t>(step * kInstructionK), 16, kAtomBytes / 2, Swizzle::B128};  // planted")
# An MN-major descriptor naming the 64-byte swizzle where TMA wrote the 128-byte one.
mg_planted_bug(wgmma_swizzle_mode FILE kernels/cuda/wgmma_layout.h COMPILE kernels/cuda/gemm_wgmma.cu
  SUITE test_cuda_gemm CASES "${gemm_wgmma}" CATCHES "${wrong_values}" ENVIRONMENT "${few_sms}"
  FIND "return {tile + static_cast<std::uint32_t>(step * 16 * kRowBytes), mn_block, kAtomBytes, Swizzle::B128};"
  REPLACE "return {tile + static_cast<std::uint32_t>(step * 16 * kRowBytes), mn_block, kAtomBytes, Swizzle::B64};  // planted")
# The epilogue writing the staging before the previous tile's TMA stores have read it: under ":wait"
# those stores read the next tile's sums.
mg_planted_bug(wgmma_staging_reused_early FILE kernels/cuda/wgmma_pipeline.cuh COMPILE kernels/cuda/gemm_wgmma.cu
  SUITE test_cuda_gemm CASES "${gemm_wgmma}" CATCHES "${wrong_values}|${a_race}" ENVIRONMENT "${few_sms}"
  FIND "  if (lane == 0) hopper::bulk_wait_read<0>();  // the previous tile's stores have read the staging\n"
  REPLACE "")
# Rung 4 of the FP8 GEMM (gemm_fp8_wgmma.cu): wgmma's 13-bit accumulator never promoted (each step's
# sum chained into the next), where the GEMM asked for promotion every 128 products: the model drops
# the small products that promotion keeps.
mg_planted_bug(fp8_wgmma_never_promoted FILE kernels/cuda/gemm_fp8_wgmma.cu COMPILE kernels/cuda/gemm_fp8_wgmma.cu
  SUITE test_cuda_fp8_wgmma CASES "cuda fp8 wgmma: promotion*" CATCHES "${wrong_values}"
  ENVIRONMENT "MG_EMULATOR_MULTIPROCESSORS=2"
  FIND "restart = args.promote_every > 0 && done % args.promote_every == 0;"
  REPLACE "restart = done < 0;  // planted: never promoted")
# Its DeepSeek-V3 blocks all scaled by the first chunk's scales.
mg_planted_bug(fp8_wgmma_first_chunk_scales FILE kernels/cuda/gemm_fp8_wgmma.cu COMPILE kernels/cuda/gemm_fp8_wgmma.cu
  SUITE test_cuda_fp8_wgmma CASES "cuda fp8 wgmma: rung 4 is*" CATCHES "${wrong_values}"
  ENVIRONMENT "MG_EMULATOR_MULTIPROCESSORS=2"
  FIND "add_scaled(total, running, lines, args.scale_a, args.scale_b, k0);"
  REPLACE "add_scaled(total, running, lines, args.scale_a, args.scale_b, 0);  // planted: the first chunk's")
