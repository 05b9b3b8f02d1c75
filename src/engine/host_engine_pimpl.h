// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The members that every host engine class (MaceEngine, NequipEngine) declares, written once:
// the Engine overrides, precision(), move-only ownership, and the implementation behind a
// pointer. The pointer is the style guide's PIMPL rule: a caller's view of an engine holds
// nothing else, so the network types, the OpenMP scratch and the kernels stay in the engine's
// .cpp files. This is a macro, not a base class, because each engine defines these members
// itself, with its own messages and its own Impl, and C++ only lets a class define the members
// it declares.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "clebsch/engine/engine.h"

/// Declares, last in the body of `class Name : public Engine`: the destructor, the move
/// constructor and assignment, the Engine overrides (species, both r_max, num_layers,
/// exchange_width, compute, memory_usage), `Precision precision() const`, the nested `class Impl`
/// and the private `std::unique_ptr<Impl> impl_`. The class's own comments document what its
/// exchange_width() and compute() mean and throw. Leaves the class body in `private:`.
#define CLEBSCH_HOST_ENGINE_PIMPL(Name)                                                         \
 public:                                                                                        \
  ~Name() override;                                                                             \
  Name(Name&&) noexcept;                                                                        \
  Name& operator=(Name&&) noexcept;                                                             \
                                                                                                \
  const std::vector<std::string>& species() const override;                                     \
  double r_max() const override;                                                                \
  double r_max(int species_a, int species_b) const override;                                    \
  int num_layers() const override;                                                              \
  int exchange_width() const override;                                                          \
  Precision precision() const;                                                                  \
  void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) override; \
  EngineMemory memory_usage() const override;                                                   \
                                                                                                \
  class Impl;                                                                                   \
                                                                                                \
 private:                                                                                       \
  std::unique_ptr<Impl> impl_
