// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Head selection of multi-head MACE models (see model_heads.h).
#include "clebsch/model/model_heads.h"

#include "clebsch/support/error.h"

namespace clebsch::model {

std::vector<std::string> head_names(const Model& model) {
  std::vector<std::string> out;
  if (model.mace)
    for (const MaceHead& h : model.mace->heads) out.push_back(h.name);
  return out;
}

std::string active_head(const Model& model) {
  if (!model.mace || model.mace->heads.empty()) return {};
  return model.mace->heads[model.mace->head].name;
}

std::string describe_heads(const Model& model) {
  if (!model.mace || model.mace->heads.empty()) return "none (a NequIP model has one output)";
  std::string text;
  for (const MaceHead& h : model.mace->heads) text += (text.empty() ? "" : ", ") + h.name;
  return text + " (default " + model.mace->heads[model.mace->default_head].name + ")";
}

void select_head(Model& model, const std::string& name) {
  if (!model.mace || model.mace->heads.empty()) {
    if (name.empty()) return;
    throw Error("head \"" + name +
                "\": the model has no heads (NequIP models have one output); drop the head "
                "keyword");
  }
  Mace& m = *model.mace;
  int index = m.default_head;
  if (!name.empty()) {
    index = -1;
    for (std::size_t h = 0; h < m.heads.size(); ++h)
      if (m.heads[h].name == name) index = static_cast<int>(h);
    if (index < 0)
      throw Error("head \"" + name + "\" is not a head of the model; its heads are " +
                  describe_heads(model));
  }
  const MaceHead& h = m.heads[index];
  m.readouts = h.readouts;
  m.atomic_energies = h.atomic_energies;
  m.scale = h.scale;
  m.shift = h.shift;
  if (m.embedding) m.embedding->readout = h.embedding_readout;
  m.head = index;
}

}  // namespace clebsch::model
