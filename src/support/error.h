// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Error types of the core library. Every failure the library can detect is reported by throwing
// one of these, with a message that says what failed, which input caused it and the value found.
// The library never exits, aborts or prints.
#pragma once

#include <stdexcept>
#include <string>

namespace clebsch {

/// Base of every exception thrown by Clebsch.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A model file is malformed, truncated or inconsistent.
class ModelFormatError : public Error {
 public:
  using Error::Error;
};

/// A request exceeds what an implementation supports (l too large, shared memory exhausted, ...).
class CapacityError : public Error {
 public:
  using Error::Error;
};

/// A CUDA driver, runtime or NVRTC call failed.
class CudaError : public Error {
 public:
  using Error::Error;
};

}  // namespace clebsch

/// Contract check for hot paths: active only in debug builds, so release kernels pay nothing.
#ifdef NDEBUG
#define CLEBSCH_EXPECTS(cond) ((void)0)
#else
#define CLEBSCH_EXPECTS(cond)                                                                   \
  ((cond) ? (void)0                                                                             \
          : throw ::clebsch::Error(std::string("contract violated: " #cond " at ") + __FILE__ + \
                                   ":" + std::to_string(__LINE__)))
#endif
