// CUDA-on-CPU: CUDA's vector types (vector_types.h) with their device
// alignments (float4, int4, double2 ... are 16-byte aligned, so a load of one
// off the 16-byte grid is undefined behaviour here too, which
// UndefinedBehaviorSanitizer reports), their make_* functions, and dim3.

#ifndef TF_OPS_TESTS_GPU_CUDA_ON_CPU_VECTOR_TYPES_H_
#define TF_OPS_TESTS_GPU_CUDA_ON_CPU_VECTOR_TYPES_H_

#define CUDA_ON_CPU_VECTOR1(T, name, align) \
  struct alignas(align) name##1 {           \
    T x;                                    \
  };                                        \
  inline name##1 make_##name##1(T x) { return {x}; }
#define CUDA_ON_CPU_VECTOR2(T, name, align) \
  struct alignas(align) name##2 {           \
    T x, y;                                 \
  };                                        \
  inline name##2 make_##name##2(T x, T y) { return {x, y}; }
#define CUDA_ON_CPU_VECTOR3(T, name) \
  struct name##3 {                   \
    T x, y, z;                       \
  };                                 \
  inline name##3 make_##name##3(T x, T y, T z) { return {x, y, z}; }
#define CUDA_ON_CPU_VECTOR4(T, name, align)             \
  struct alignas(align) name##4 {                       \
    T x, y, z, w;                                       \
  };                                                    \
  inline name##4 make_##name##4(T x, T y, T z, T w) { \
    return {x, y, z, w};                                \
  }
#define CUDA_ON_CPU_VECTORS(T, name, a1, a2, a4) \
  CUDA_ON_CPU_VECTOR1(T, name, a1)               \
  CUDA_ON_CPU_VECTOR2(T, name, a2)               \
  CUDA_ON_CPU_VECTOR3(T, name)                   \
  CUDA_ON_CPU_VECTOR4(T, name, a4)

CUDA_ON_CPU_VECTORS(signed char, char, 1, 2, 4)
CUDA_ON_CPU_VECTORS(unsigned char, uchar, 1, 2, 4)
CUDA_ON_CPU_VECTORS(short, short, 2, 4, 8)
CUDA_ON_CPU_VECTORS(unsigned short, ushort, 2, 4, 8)
CUDA_ON_CPU_VECTORS(int, int, 4, 8, 16)
CUDA_ON_CPU_VECTORS(unsigned int, uint, 4, 8, 16)
CUDA_ON_CPU_VECTORS(long, long, 8, 16, 16)
CUDA_ON_CPU_VECTORS(unsigned long, ulong, 8, 16, 16)
CUDA_ON_CPU_VECTORS(long long, longlong, 8, 16, 16)
CUDA_ON_CPU_VECTORS(unsigned long long, ulonglong, 8, 16, 16)
CUDA_ON_CPU_VECTORS(float, float, 4, 8, 16)
CUDA_ON_CPU_VECTORS(double, double, 8, 16, 16)

#undef CUDA_ON_CPU_VECTORS
#undef CUDA_ON_CPU_VECTOR1
#undef CUDA_ON_CPU_VECTOR2
#undef CUDA_ON_CPU_VECTOR3
#undef CUDA_ON_CPU_VECTOR4

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

#endif  // TF_OPS_TESTS_GPU_CUDA_ON_CPU_VECTOR_TYPES_H_
