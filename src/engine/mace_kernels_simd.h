// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The compiler attributes of the MACE host kernels (mace_kernels.h), shared by the files that
// build them: a hot loop is written once as an always-inline template and compiled three times,
// inside functions marked for AVX-512, AVX2+FMA and baseline x86-64, so that the library needs no
// -march flag and still runs vector code on whatever CPU it lands on (simd_level() picks the
// copy at run time). Private to src/engine/'s mace_kernels_*.cpp.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define CLEBSCH_INLINE __attribute__((always_inline)) inline
#define CLEBSCH_RESTRICT __restrict__
#else
#define CLEBSCH_INLINE inline
#define CLEBSCH_RESTRICT
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CLEBSCH_X86_DISPATCH 1
#define CLEBSCH_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define CLEBSCH_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define CLEBSCH_X86_DISPATCH 0
#endif
