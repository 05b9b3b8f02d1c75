// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model-file reader: turns an exported `.safetensors` model (potentials/FORMAT.md, format
// 1.x) into the typed description of model.h. The safetensors container is validated by
// safetensors.h; this layer validates everything inside it before an engine sees it: the format
// name and version (an unknown MAJOR is rejected, naming both versions), every required field and
// its JSON type, every tensor reference (the tensor exists, is F64, holds finite values, and its
// shape equals both the reference's and the shape the op implies), irreps strings and their
// consistency along the network (e.g. linear_up.irreps_out == conv_tp.irreps_in1, conv TP weight
// count == radial MLP width), instruction indices and selection rules, gate gather indices
// (cross-checked with clebsch::Gate), couplings (multiples of wigner_3j), species, cutoffs and
// spherical harmonics, and that every tensor of the file is referenced. Any problem raises
// ModelFormatError with a message naming the file, the JSON path of the field (as
// `mace.interactions[1].conv_tp.instructions[3].i_in1`) and the value found; nothing else is
// thrown for malformed input, and no input makes the reader read out of bounds or overflow.
//
// Fields that FORMAT.md calls informative (source.packages, cg_vs_wigner_3j, notes, ...) are not
// required; unknown fields are ignored, as a MINOR version may add optional ones.
#pragma once

#include <string>

#include "clebsch/model/model.h"
#include "clebsch/model/safetensors.h"

namespace clebsch {

/// The format name a model file carries in `__metadata__.format` and `model_json.format`.
inline constexpr const char* kModelFormatName = "clebsch-model";
/// The version this reader implements; it accepts any 1.x.
inline constexpr const char* kModelFormatVersion = "1.1";
inline constexpr int kModelFormatMajor = 1;

/// Reads, validates and decodes the model file at @p path.
/// @throws ModelFormatError naming the file, the field and the value when anything is wrong.
model::Model read_model(const std::string& path);

/// Validates and decodes a model file already loaded (and container-validated) in memory.
/// @throws ModelFormatError naming file.origin(), the field and the value when anything is wrong.
model::Model parse_model(const SafetensorsFile& file);

}  // namespace clebsch
