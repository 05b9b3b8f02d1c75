// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The typed description of an exported model (potentials/FORMAT.md, format 1.x): what the model
// reader produces after validating a file, and what the host and CUDA engines consume. It mirrors
// FORMAT.md section by section; every tensor is already decoded to float64 and checked against
// the shape its op implies, every irreps string is parsed, and every index is in range, so an
// engine can trust it without re-checking. Tensor-product couplings are the exported ones (the
// module's own CG signs with the path weight folded in), never recomputed. model_reader.h
// produces it; the guarantees listed on each field are what the reader has checked.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "clebsch/nn/activation.h"
#include "clebsch/o3/irreps.h"
#include "clebsch/o3/tensor_product.h"

namespace clebsch::model {

/// `cst * phi(x)` (FORMAT.md §3.5). Absent (std::nullopt where optional) means identity.
struct Activation {
  /// phi, one per name of FORMAT.md §3.5.
  enum class Kind { kSilu, kTanh, kSigmoid, kAbs, kSsp, kGelu, kMish };
  std::string name;  ///< silu, tanh, sigmoid, abs, ssp, gelu, mish (the file's spelling)
  Kind kind = Kind::kSilu;
  double cst = 1.0;  ///< finite
};

/// e3nn o3.Linear without bias (§4.1). Checked: indices in range, irreps_in[i_in] and
/// irreps_out[i_out] are the same irrep, mul_in/mul_out are their multiplicities, the weight
/// blocks tile `weight` in instruction order (as clebsch::Linear lays them out), and
/// clebsch::Linear(irreps_in, irreps_out, {LinearPath(i_in, i_out, path_weight)...}) accepts it.
struct Linear {
  struct Instruction {
    int i_in, i_out;
    int mul_in, mul_out;
    double path_weight;
    int weight_offset;  ///< into weight; the block is [mul_in][mul_out] row-major
  };
  Irreps irreps_in, irreps_out;
  std::vector<Instruction> instructions;
  std::vector<double> weight;  ///< flat; empty when there are no instructions
  /// [dim(irreps_out)] added to the output (e3nn biases=True: non-zero on scalar outputs
  /// only), or empty.
  std::vector<double> bias;
};

/// e3nn TensorProduct (§4.2). The descriptor is built with the exported couplings
/// (clebsch::TensorProduct::with_couplings), so the host kernels (tensor_product.h,
/// convolution.h) evaluate exactly what the module evaluated; its path shapes, weight offsets and
/// weight_numel equal the file's, and each coupling was checked to be a multiple of wigner_3j
/// (any sign) of size |path_weight|. descriptor.shared_weights() == !external_weights.
struct TensorProduct {
  clebsch::TensorProduct descriptor;
  bool external_weights = false;  ///< true: one weight row per input row, from another op
  std::vector<double> weight;     ///< [weight_numel] when internal, else empty
};

/// Dense MLP (§4.3): per layer z = (x W) * weight_scale (+ bias); then, with an activation,
/// z = out_scale * cst * phi(z).
struct Mlp {
  struct Layer {
    int h_in, h_out;
    std::vector<double> weight;  ///< [h_in][h_out]
    std::vector<double> bias;    ///< [h_out] or empty
    double weight_scale = 1.0;
    /// torch LayerNorm over the layer's h_out outputs (after the bias, before the activation):
    /// z = (z - mean) / sqrt(var + eps) * weight + bias (biased variance).
    struct LayerNorm {
      std::vector<double> weight, bias;  ///< [h_out]
      double eps = 1e-5;
    };
    std::optional<LayerNorm> layer_norm;
    std::optional<Activation> activation;
    double out_scale = 1.0;
  };
  std::vector<Layer> layers;
  int dim_in() const { return layers.empty() ? 0 : layers.front().h_in; }
  int dim_out() const { return layers.empty() ? 0 : layers.back().h_out; }
};

/// e3nn nn.Activation (§4.4): one optional activation per block of irreps_in (scalars only).
/// Checked: irreps_out has the layout e3nn derives (an odd scalar keeps an odd activation's
/// parity, becomes even through an even one; other activations are refused on odd scalars).
struct ScalarActivation {
  Irreps irreps_in, irreps_out;
  std::vector<std::optional<Activation>> acts;
};

/// e3nn nn.Gate (§4.5), with the gather indices into the input row. Checked: the index lists
/// have the dimensions of their irreps and equal the gather of clebsch::Gate built from
/// irreps_scalars/gates/gated, irreps_in is that gate's input, irreps_out has the layout e3nn's
/// Gate gives for these activations, and gates count one per gated irrep copy.
struct Gate {
  Irreps irreps_in, irreps_out;
  Irreps irreps_scalars, irreps_gates, irreps_gated;
  std::vector<int> index_scalars, index_gates, index_gated;
  std::vector<std::optional<Activation>> act_scalars;  ///< one per block of irreps_scalars
  std::vector<std::optional<Activation>> act_gates;    ///< one per block of irreps_gates
};

/// MACE symmetric contraction (§4.6). Checked: every block of irreps_in has num_features
/// channels, dim_a = sum of 2l+1, one contraction per block of irreps_out (same irrep, mul =
/// num_features), terms nu = 1..correlation in order with U [2L+1, dim_a x nu, K] and
/// W [num_species, K, num_features].
struct SymmetricContraction {
  struct Term {
    int nu;                             ///< correlation order of this term, 1..correlation
    std::vector<std::int64_t> u_shape;  ///< [2L+1, D x nu, K]
    std::vector<double> U;
    int K;
    std::vector<double> W;  ///< [num_species][K][C]
  };
  struct Contraction {
    Irrep irrep_out;
    int mul;  ///< = num_features
    std::vector<Term> terms;
  };
  Irreps irreps_in, irreps_out;
  int num_features = 0;  ///< C
  int dim_a = 0;         ///< D
  std::vector<Contraction> contractions;
};

/// One model species. Checked: symbols are unique and non-empty, Z in 0..118, and for Z > 0 the
/// symbol is that element's.
struct Species {
  int Z = 0;              ///< atomic number, 0 if unknown
  std::string symbol;     ///< element symbol (LAMMPS pair_coeff name); NequIP type name if Z = 0
  std::string type_name;  ///< NequIP's type name; empty for MACE
};

// ---------------------------------------------------------------------------------------------
// MACE (§5)
// ---------------------------------------------------------------------------------------------

struct MaceRadial {
  /// bessel: prefactor sin(w_n x)/x; gaussian: exp(coeff (x - c_n)^2); chebyshev: T_n(x),
  /// n = 1..num_basis (mace radial_type, FORMAT.md §5).
  enum class Basis { kBessel, kGaussian, kChebyshev };
  Basis basis = Basis::kBessel;
  int num_basis = 0;
  std::vector<double> bessel_weights;    ///< [num_basis] (bessel)
  std::vector<double> gaussian_centres;  ///< [num_basis] (gaussian)
  double gaussian_coeff = 0;             ///< (gaussian)
  double prefactor = 0;
  double r_max = 0;  ///< of the basis and of the cutoff (checked equal), = Model::r_max
  double cutoff_p = 0;
  bool apply_cutoff = true;
  struct Agnesi {
    double q, p, a;
    std::vector<double> covalent_radii;  ///< [num_species]
  };
  struct Soft {
    double alpha;
    std::vector<double> covalent_radii;  ///< [num_species]
  };
  std::optional<Agnesi> agnesi;
  std::optional<Soft> soft;
};

struct MaceZbl {
  double p, a_exp, a_prefactor, coulomb, bohr;
  std::array<double, 4> c, exponents;
  std::vector<double> atomic_numbers;  ///< [num_species]
  std::vector<double> covalent_radii;  ///< [num_species]
};

/// A radial function r -> R^width tabulated as a cubic Hermite spline on uniform knots
/// r_k = r_lo + k h, h = (r_hi - r_lo) / intervals: values[k][0][w] = f_w(r_k) and
/// values[k][1][w] = h f_w'(r_k). Not part of the file: tabulate_radial_functions
/// (engine/radial_spline.h) makes it when the user asks for `radial spline N`, and the engines
/// then evaluate it in place of the MLP it replaces.
struct RadialSpline {
  double r_lo = 0, r_hi = 0;
  int intervals = 0, width = 0;
  std::vector<double> values;  ///< [intervals + 1][2][width]
};

struct MaceInteraction {
  std::string cls;
  bool residual = false;
  bool density_normalization = false;
  Irreps irreps_node_in, irreps_edge_attrs, irreps_edge_feats, irreps_edge, irreps_mid,
      irreps_target, irreps_hidden_out;
  Linear linear_up, linear;
  Mlp radial_mlp;
  TensorProduct conv_tp;               ///< uvu, external weights
  TensorProduct skip_tp;               ///< uvw, internal weights, second input = one-hot species
  bool skip_on_node_features = false;  ///< true: sc = skip_tp(h_in, o); false: M = skip_tp(M, o)
  double avg_num_neighbors = 1.0;      ///< used when !density_normalization
  std::optional<Mlp> density_mlp;      ///< used when density_normalization
  /// radial_mlp(e(r)) and density_mlp(e(r)) as splines of r (RadialSpline), when tabulated.
  std::optional<RadialSpline> radial_spline, density_spline;

  /// RealAgnosticResidualNonLinearInteractionBlock (FORMAT.md §5, kind residual_nonlinear).
  /// Then skip_tp, linear and avg_num_neighbors are unused; radial_mlp and density_mlp read
  /// [e_e | source_embedding(o_sender) | target_embedding(o_centre)], and
  ///   sc = skip(h); A = linear_2(gate(linear_1(M) / (beta D + alpha) + linear_res(hu))).
  struct NonLinear {
    Irreps irreps_nonlin;
    Linear source_embedding, target_embedding;  ///< S x 0e -> C0 x 0e
    Linear linear_res, linear_1, linear_2, skip;
    Gate gate;
    double alpha = 1.0, beta = 0.0;
  };
  std::optional<NonLinear> nonlinear;
};

struct MaceProduct {
  SymmetricContraction contraction;
  Linear linear;
  bool add_skip = false;
};

struct MaceReadout {
  int layer = 0;           ///< index t of the h^t it reads
  bool nonlinear = false;  ///< false: e = linear(h)[0]; true: linear_2(activation(linear_1(h)))[0]
  Linear linear;           ///< the linear readout, or linear_1
  std::optional<ScalarActivation> activation;
  std::optional<Linear> linear_2;
  /// NonLinearBiasReadoutBlock: linear_2(act(linear_mid(act(linear_1(h))))), same activation
  /// twice; linear_mid and linear_2 carry biases.
  std::optional<Linear> linear_mid;
};

/// Per-structure embedding (MACE embedding_specs, FORMAT.md §5): h0 += act(concat_f emb_f) P,
/// the same row for every atom; the readout's energy is added outside the scale.
struct MaceEmbedding {
  struct Feature {
    std::string name;  ///< the per-structure input, e.g. total_charge, total_spin
    bool categorical = true;
    int num_classes = 0;
    double offset = 0;
    int dim = 0;                ///< embedding width
    std::vector<double> table;  ///< categorical: [num_classes][dim]
    Mlp mlp;                    ///< continuous: 1 -> dim
  };
  std::vector<Feature> features;
  std::vector<double> project;  ///< [sum of dims][C]
  int dim_out = 0;              ///< C
  std::optional<Activation> project_activation;
  std::optional<Linear> readout;  ///< C x 0e -> 1x0e
};

/// One head of a MACE model (FORMAT.md §5 heads): what differs between the heads of a multi-head
/// model. Checked like the top-level fields it replaces (readouts end in one energy, E0 has one
/// value per species, the embedding readout reads h0's scalars).
struct MaceHead {
  std::string name;  ///< unique among the model's heads
  std::vector<MaceReadout> readouts;
  std::vector<double> atomic_energies;  ///< [num_species]
  double scale = 1.0, shift = 0.0;
  std::optional<Linear> embedding_readout;  ///< C x 0e -> 1x0e, with an embedding that has one
};

struct Mace {
  Linear node_embedding;  ///< from one-hot species (S x 0e)
  MaceRadial radial;
  std::optional<MaceZbl> pair_repulsion;
  std::vector<MaceInteraction> interactions;
  std::vector<MaceProduct> products;
  std::vector<MaceReadout> readouts;
  std::vector<double> atomic_energies;  ///< [num_species]
  double scale = 1.0, shift = 0.0;
  std::optional<MaceEmbedding> embedding;
  /// Every head in file order (one for a single-head model or a 1.0 file, named "Default"). The
  /// readouts, atomic_energies, scale, shift and embedding->readout above are heads[head]'s,
  /// which is what the engines evaluate; select_head() (model_heads.h) changes them.
  std::vector<MaceHead> heads;
  int head = 0;          ///< index into heads of the head the fields above hold
  int default_head = 0;  ///< index into heads of the file's default_head
};

// ---------------------------------------------------------------------------------------------
// NequIP (§6)
// ---------------------------------------------------------------------------------------------

struct NequipRadial {
  int num_basis = 0;
  std::vector<double> bessel_weights;  ///< [num_basis]
  std::vector<double> rmax_recip;      ///< [num_species][num_species], [centre][neighbour]
  double cutoff_p = 6;
  double factor = 1;
};

struct NequipLayer {
  std::string cls;
  Irreps irreps_in, irreps_out;
  bool resnet = false;
  std::optional<TensorProduct> sc;  ///< uvw, internal, second input = type embedding
  Linear linear_1;
  std::vector<double> norm_const;  ///< [num_species] (the reader broadcasts a stored [1])
  Mlp edge_mlp;
  TensorProduct tp;  ///< uvu, external weights
  Linear linear_2;
  Gate gate;
};

struct NequipZbl {
  std::vector<double> atomic_numbers;  ///< [num_species]
  double qqr2exesquare, pzbl, a0, cutoff_p;
  std::array<double, 4> c, d;
};

struct Nequip {
  std::vector<double> type_embedding;  ///< [num_species][embedding_dim]
  int embedding_dim = 0;
  NequipRadial radial;
  std::vector<NequipLayer> layers;
  Mlp readout;
  std::vector<double> scales, shifts;  ///< [num_species]
  std::optional<NequipZbl> pair_potential;
};

// ---------------------------------------------------------------------------------------------
// The whole model
// ---------------------------------------------------------------------------------------------

enum class Arch { kMace, kNequip };
/// Which way an edge vector points (FORMAT.md §3.1).
enum class EdgeVector { kCentreMinusNeighbour, kNeighbourMinusCentre };

struct Model {
  std::string format_version;  ///< "MAJOR.MINOR"
  Arch arch = Arch::kMace;
  std::string model_dtype;  ///< "float32" / "float64": the training precision
  std::string source_sha256;
  std::vector<Species> species;
  double r_max = 0;
  std::vector<double> r_max_pairs;  ///< [S][S]
  EdgeVector edge_vector = EdgeVector::kCentreMinusNeighbour;
  int sh_lmax = 0;
  Irreps sh_irreps;
  std::optional<Mace> mace;      ///< set when arch == kMace
  std::optional<Nequip> nequip;  ///< set when arch == kNequip
  /// Values in the file's tensors: the size of the model's data (engines report their copy of
  /// it as this many values of their network type in memory_usage()).
  std::size_t num_values = 0;

  int num_species() const { return static_cast<int>(species.size()); }
};

}  // namespace clebsch::model
