// Stand-in (our own) for <cuda.h>: the host snippets need no CUDA, only the stream and dim3 types.
#pragma once
typedef struct CUstream_st *cudaStream_t;
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
