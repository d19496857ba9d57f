// micro_common.h — what the single-file micro-benchmarks here share: short integer
// names, CK (abort with file, line, call and the CUDA error on any failure) and the
// most GPUs a run drives. Each .cu still builds alone: nvcc finds this header beside it.
#pragma once
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

typedef unsigned long long u64;
typedef unsigned int u32;

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

constexpr int MAXR = 8;
