// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The command-line pieces the benchmark programs share: comma-separated lists, and the value of
// an option that takes one (the next argument, or an error naming the option). Header-only.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "clebsch/support/error.h"

namespace clebsch::bench {

/// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

/// The argument after argv[i] (i moves to it). @throws Error naming the option when there is
/// none.
inline std::string option_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw Error("option " + std::string(argv[i]) + " needs a value");
  return argv[++i];
}

}  // namespace clebsch::bench
