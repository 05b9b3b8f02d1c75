// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// mace_embedding_row (see mace_embedding.h).
#include "clebsch/engine/mace_embedding.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <sstream>

#include "clebsch/engine/mace_kernels.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

std::string fmt(double x) {
  std::ostringstream s;
  s.precision(10);
  s << x;
  return s.str();
}

}  // namespace

std::vector<double> mace_embedding_row(const model::MaceEmbedding& E,
                                       const std::vector<std::pair<std::string, double>>& inputs) {
  std::vector<double> x;
  for (const auto& f : E.features) {
    const auto it = std::find_if(inputs.begin(), inputs.end(),
                                 [&](const auto& kv) { return kv.first == f.name; });
    if (it == inputs.end())
      throw Error("the model needs the per-structure input " + f.name +
                  " (its mace embedding_specs); give it to the pair style (keyword " +
                  (f.name == "total_charge" ? std::string("charge")
                   : f.name == "total_spin" ? std::string("spin")
                                            : "input " + f.name) +
                  ")");
    const double v = it->second;
    if (!std::isfinite(v)) throw Error(f.name + " is not finite");
    if (f.categorical) {
      const double k = std::trunc(v + f.offset);  // torch .long() truncates toward zero
      if (!(k >= 0 && k < f.num_classes))
        throw Error(f.name + " = " + fmt(v) + " is outside the model's " +
                    std::to_string(f.num_classes) + " classes (offset " + fmt(f.offset) + ")");
      const std::size_t row = static_cast<std::size_t>(k) * f.dim;
      x.insert(x.end(), f.table.begin() + row, f.table.begin() + row + f.dim);
    } else {
      mace_detail::Mlp<double> mlp(f.mlp, "mace.embedding." + f.name);
      std::vector<double> in{v}, out(f.dim), scratch(mlp.scratch_size(1));
      mlp.forward(1, in.data(), out.data(), scratch.data());
      x.insert(x.end(), out.begin(), out.end());
    }
  }
  const int C = E.dim_out;
  std::vector<double> row(C, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i)
    for (int c = 0; c < C; ++c) row[c] += x[i] * E.project[i * C + c];
  if (E.project_activation) {
    const mace_detail::ScalarAct act =
        mace_detail::ScalarAct::from(*E.project_activation, "mace.embedding.project");
    for (double& v : row) v = act.value(v);
  }
  return row;
}

}  // namespace clebsch
