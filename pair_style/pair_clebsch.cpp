// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Implementation of pair_style clebsch (see pair_clebsch.h for the design).

#include "pair_clebsch.h"

#include "atom.h"
#include "citeme.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "input.h"
#include "memory.h"
#include "neigh_list.h"
#include "neighbor.h"
#include "update.h"
#include "variable.h"

#include "clebsch/engine/engine.h"
#include "clebsch/engine/host_engine.h"
#include "clebsch/engine/radial_spline.h"
#include "clebsch/model/model_heads.h"
#include "clebsch/model/model_reader.h"
#include "clebsch_md_checks.h"
#include "clebsch_pair_common.h"
#include "cuda_engine_loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <optional>
#include <type_traits>

using namespace LAMMPS_NS;

namespace {

// The engine's view of LAMMPS communication between layers.
class PairGhostExchange : public clebsch::GhostExchange {
 public:
  explicit PairGhostExchange(PairClebsch *pair) : pair_(pair) {}
  void forward(double *rows, int width) override { pair_->exchange_forward(rows, width); }
  void forward(float *rows, int width) override { pair_->exchange_forward(rows, width); }
  void reverse(double *rows, int width) override { pair_->exchange_reverse(rows, width); }
  void reverse(float *rows, int width) override { pair_->exchange_reverse(rows, width); }

 private:
  PairClebsch *pair_;
};

using clebsch_pair::kGhostTallyWidth;

// The papers of the two model families, for LAMMPS's citation reminder (doc page, References).
const char cite_clebsch[] =
    "pair clebsch (MACE and NequIP models):\n\n"
    "@inproceedings{Batatia2022,\n"
    " author = {Batatia, I. and Kovacs, D. P. and Simm, G. N. C. and Ortner, C. and Csanyi, G.},\n"
    " title = {{MACE}: Higher Order Equivariant Message Passing Neural Networks for Fast and "
    "Accurate Force Fields},\n"
    " booktitle = {Advances in Neural Information Processing Systems},\n"
    " volume = {35},\n year = {2022}\n}\n\n"
    "@article{Batzner2022,\n"
    " author = {Batzner, S. and Musaelian, A. and Sun, L. and Geiger, M. and Mailoa, J. P. and "
    "Kornbluth, M. and Molinari, N. and Smidt, T. E. and Kozinsky, B.},\n"
    " title = {E(3)-equivariant graph neural networks for data-efficient and accurate "
    "interatomic potentials},\n"
    " journal = {Nature Communications},\n volume = {13},\n pages = {2453},\n year = {2022}\n}\n\n";

}    // namespace

/* ---------------------------------------------------------------------- */

PairClebsch::PairClebsch(LAMMPS *lmp) :
    Pair(lmp), precision_name_("fp64"), device_name_("cpu"), cutoff_(0.0)
{
  if (lmp->citeme) lmp->citeme->add(cite_clebsch);
  single_enable = 0;
  restartinfo = 0;
  one_coeff = 1;
  manybody_flag = 1;
  centroidstressflag = CENTROID_NOTAVAIL;
  // Forces on ghosts are not filled on one rank (ghosts are replaced by their owners), so the
  // virial comes from the edges, never from f dot r.
  no_virial_fdotr_compute = 1;
}

PairClebsch::~PairClebsch()
{
  if (allocated) {
    memory->destroy(setflag);
    memory->destroy(cutsq);
  }
}

void PairClebsch::allocate()
{
  allocated = 1;
  const int n = atom->ntypes + 1;
  memory->create(setflag, n, n, "pair:setflag");
  memory->create(cutsq, n, n, "pair:cutsq");
  for (int i = 1; i < n; i++)
    for (int j = i; j < n; j++) setflag[i][j] = 0;
}

/* ----------------------------------------------------------------------
   pair_style clebsch [precision fp64|fp32|mixed] [device cpu|gpu] [deterministic yes|no]
                      [edge_batch N] [head NAME] [charge Q] [spin S]
                      [radial exact|spline N]
------------------------------------------------------------------------- */

void PairClebsch::settings(int narg, char **arg)
{
  // LAMMPS calls settings() again on this object when a script re-issues pair_style clebsch:
  // every keyword starts from its default, as on the first call, not from the previous line.
  Keywords before{precision_name_, device_name_, edge_batch_,
                  deterministic_,  head_name_,   radial_spline_};
  if (!defaults_taken_) {
    defaults_ = before;
    defaults_taken_ = true;
  }
  Keywords k = defaults_;
  std::vector<std::pair<std::string, std::string>> inputs;    // charge/spin: none by default too
  int iarg = 0;
  while (iarg < narg) {
    const std::string key = arg[iarg];
    if (iarg + 1 >= narg) error->all(FLERR, "Pair style clebsch: keyword {} needs a value", key);
    const std::string value = arg[iarg + 1];
    if (key == "precision") {
      try {
        clebsch::precision_from_string(value);
      } catch (std::exception &e) {
        error->all(FLERR, "Pair style clebsch: {}", e.what());
      }
      k.precision = value;
    } else if (key == "device") {
      if (value != "cpu" && value != "gpu")
        error->all(FLERR, "Pair style clebsch: device must be cpu or gpu, got {}", value);
      k.device = value;
    } else if (key == "deterministic") {
      // The host engine is always deterministic (fixed summation order for any thread count);
      // the CUDA engine's convolution accumulates in fixed order (yes) or with atomics (no).
      k.deterministic = utils::logical(FLERR, value, false, lmp) != 0;
    } else if (key == "edge_batch") {
      // The CUDA engines' batch of neighbor pairs (their memory knob); the host engine has no
      // per-pair weights to batch.
      k.edge_batch = utils::bnumeric(FLERR, value, false, lmp);
      if (k.edge_batch < 0)
        error->all(FLERR,
                   "Pair style clebsch: edge_batch must be 0 (automatic) or a number of "
                   "neighbor pairs per batch, got {}",
                   value);
    } else if (key == "head") {
      // Checked against the model's heads when the engine is built (pair_coeff, or now on a
      // re-issued pair_style).
      k.head = value;
    } else if (key == "radial") {
      // The radial MLPs exactly (default), or tabulated as splines of N intervals: an
      // approximation the user opts into (engine/radial_spline.h).
      if (value == "exact") {
        k.radial_spline = 0;
      } else if (value == "spline") {
        if (iarg + 2 >= narg)
          error->all(FLERR, "Pair style clebsch: radial spline needs a number of intervals");
        k.radial_spline = utils::inumeric(FLERR, arg[iarg + 2], false, lmp);
        if (k.radial_spline < clebsch::kMinSplineIntervals ||
            k.radial_spline > clebsch::kMaxSplineIntervals)
          error->all(FLERR, "Pair style clebsch: radial spline needs {} to {} intervals, got {}",
                     clebsch::kMinSplineIntervals, clebsch::kMaxSplineIntervals, arg[iarg + 2]);
        iarg++;
      } else {
        error->all(FLERR, "Pair style clebsch: radial must be exact or spline N, got {}", value);
      }
    } else if (key == "charge" || key == "spin") {
      // total_charge / total_spin of models with per-structure embeddings (mace-torch's
      // multiplicity convention: spin 1 = singlet).
      inputs.emplace_back(key == "charge" ? "total_charge" : "total_spin", value);
    } else {
      error->all(FLERR,
                 "Pair style clebsch: unknown keyword {} (expected precision, device, "
                 "deterministic, edge_batch, head, charge, spin or radial)",
                 key);
    }
    iarg += 2;
  }
  precision_name_ = k.precision;
  device_name_ = k.device;
  edge_batch_ = k.edge_batch;
  deterministic_ = k.deterministic;
  head_name_ = k.head;
  radial_spline_ = k.radial_spline;
  const bool inputs_changed = inputs != structure_inputs_;
  structure_inputs_ = std::move(inputs);
  // A re-issued pair_style keeps the pair_coeff of the previous one (LAMMPS does not ask for it
  // again), so the loaded model gets an engine of the new keywords now.
  if (engine_ && (!(k == before) || inputs_changed)) {
    build_engine();
    if (comm->me == 0)
      utils::logmesg(lmp, "Clebsch: engine rebuilt for {} (precision {}, device {}{})\n",
                     model_path_, precision_name_, device_name_, head_text());
  }
}

void PairClebsch::build_engine(clebsch::model::Model *given)
{
  engine_.reset();
  std::optional<clebsch::model::Model> reread;
  if (!given) {
    try {
      reread.emplace(clebsch::read_model(model_path_));
    } catch (std::exception &e) {
      error->all(FLERR, "Pair style clebsch: cannot load model: {}", e.what());
    }
  }
  clebsch::model::Model &model = given ? *given : *reread;
  // The engines evaluate the head the model's readout fields hold (model_heads.h).
  try {
    clebsch::model::select_head(model, head_name_);
  } catch (std::exception &e) {
    error->all(FLERR,
               "Pair style clebsch: {} (model {}); change the head keyword of pair_style, or "
               "leave it out for the default head",
               e.what(), model_path_);
  }
  if (radial_spline_ > 0) {
    try {
      clebsch::tabulate_radial_functions(model, radial_spline_);
    } catch (std::exception &e) {
      error->all(FLERR, "Pair style clebsch: {} (model {})", e.what(), model_path_);
    }
  }
  active_head_ = clebsch::model::active_head(model);
  multi_head_ = clebsch::model::head_names(model).size() > 1;
  try {
    const clebsch::Precision precision = clebsch::precision_from_string(precision_name_);
    if (device_name_ == "gpu")
      engine_ = clebsch::load_cuda_engine(model, precision, deterministic_, gpu_ordinal(),
                                          edge_batch_, structure_values());
    else
      engine_ = clebsch::make_host_engine(model, precision, structure_values());
  } catch (std::exception &e) {
    error->all(FLERR, "Pair style clebsch: cannot build the engine: {}", e.what());
  }
  cutoff_ = engine_->r_max();
}

/* ----------------------------------------------------------------------
   pair_coeff * * model.safetensors El1 El2 ... (one element name per atom type)
------------------------------------------------------------------------- */

std::vector<std::pair<std::string, double>> PairClebsch::structure_values()
{
  std::vector<std::pair<std::string, double>> out;
  for (const auto &[name, text] : structure_inputs_) {
    double v = 0;
    if (utils::strmatch(text, "^v_")) {
      const int ivar = input->variable->find(text.substr(2).c_str());
      if (ivar < 0 || !input->variable->equalstyle(ivar))
        error->all(FLERR, "Pair style clebsch: {} needs an equal-style variable, {} is not one",
                   name, text);
      v = input->variable->compute_equal(ivar);
    } else {
      v = utils::numeric(FLERR, text, false, lmp);
    }
    out.emplace_back(name, v);
  }
  return out;
}

void PairClebsch::coeff(int narg, char **arg)
{
  if (!allocated) allocate();
  const int ntypes = atom->ntypes;
  if (narg < 3 || strcmp(arg[0], "*") != 0 || strcmp(arg[1], "*") != 0)
    error->all(FLERR,
               "Pair style clebsch: pair_coeff must be '* * <model file> <element per "
               "atom type>'");
  if (narg != 3 + ntypes)
    error->all(FLERR,
               "Pair style clebsch: pair_coeff needs one element name per atom type: "
               "{} atom types, got {} names",
               ntypes, narg - 3);

  // LAMMPS's search (current directory, then LAMMPS_POTENTIALS); the reader names a missing file.
  std::string path = utils::get_potential_file_path(arg[2]);
  if (path.empty()) path = arg[2];
  std::optional<clebsch::model::Model> loaded;
  try {
    loaded.emplace(clebsch::read_model(path));
  } catch (std::exception &e) {
    error->all(FLERR, "Pair style clebsch: cannot load model: {}", e.what());
  }
  clebsch::model::Model &model = *loaded;

  std::string known;
  for (const auto &sp : model.species) known += (known.empty() ? "" : " ") + sp.symbol;
  // NULL leaves a type to the other styles of pair_style hybrid/overlay (as pair_style pace and
  // the other many-body styles do); those atoms are not nodes of the model's graph.
  type_to_species_.assign(ntypes + 1, -1);
  int num_null = 0;
  for (int t = 1; t <= ntypes; t++) {
    const std::string element = arg[2 + t];
    if (element == "NULL") {
      num_null++;
      continue;
    }
    for (int s = 0; s < model.num_species(); s++)
      if (model.species[s].symbol == element) type_to_species_[t] = s;
    if (type_to_species_[t] < 0)
      error->all(FLERR,
                 "Pair style clebsch: element {} (atom type {}) is not in model {}, "
                 "which has: {} (or NULL for a type another hybrid sub-style covers)",
                 element, t, path, known);
  }
  if (num_null == ntypes)
    error->all(FLERR, "Pair style clebsch: pair_coeff maps every atom type to NULL");
  // Under hybrid, force->pair is the hybrid style, which gives NULL types to other sub-styles.
  if (num_null > 0 && force->pair == this)
    for (int t = 1; t <= ntypes; t++)
      if (type_to_species_[t] < 0)
        error->all(FLERR,
                   "Pair style clebsch: atom type {} is NULL in pair_coeff, which only pair_style "
                   "hybrid/overlay (with another style for that type) allows",
                   t);
  if (num_null > 0 && kokkosable)
    error->all(FLERR,
               "Pair style clebsch/kk: NULL in pair_coeff is not supported by the Kokkos style; "
               "use pair_style clebsch (without the kk suffix) inside pair_style hybrid/overlay");

  model_path_ = path;
  build_engine(&model);
  for (int i = 1; i <= ntypes; i++)
    for (int j = i; j <= ntypes; j++)
      setflag[i][j] = type_to_species_[i] >= 0 && type_to_species_[j] >= 0 ? 1 : 0;

  if (comm->me == 0) {
    std::string batch =
        device_name_ == "gpu" && edge_batch_ > 0 ? fmt::format(", edge_batch {}", edge_batch_) : "";
    if (radial_spline_ > 0) batch += fmt::format(", radial spline {}", radial_spline_);
    utils::logmesg(lmp, "Clebsch: loaded {} ({} layers, r_max {} A, precision {}, device {}{}{})\n",
                   path, engine_->num_layers(), cutoff_, precision_name_, device_name_, batch,
                   head_text());
    for (int t = 1; t <= ntypes; t++)
      if (type_to_species_[t] < 0)
        utils::logmesg(lmp, "  atom type {} -> NULL (not in the model's graph)\n", t);
      else
        utils::logmesg(lmp, "  atom type {} -> {} (model species {})\n", t, arg[2 + t],
                       type_to_species_[t]);
  }
}

/* ---------------------------------------------------------------------- */

void PairClebsch::init_style()
{
  if (!engine_) error->all(FLERR, "Pair style clebsch: pair_coeff * * <model> ... is missing");
  if (strcmp(update->unit_style, "metal") != 0)
    error->all(FLERR,
               "Pair style clebsch requires 'units metal' (eV, Angstrom); the input uses "
               "'units {}'",
               update->unit_style);
  if (atom->tag_enable == 0) error->all(FLERR, "Pair style clebsch requires atom IDs");
  neighbor->add_request(this, NeighConst::REQ_FULL);
  // Buffers of the per-layer exchanges: the widest feature row, or the newton-off tally.
  comm_forward = engine_->exchange_width();
  comm_reverse = std::max(engine_->exchange_width(), kGhostTallyWidth);
  comm_reverse_off = comm_reverse;
  // pair_style hybrid sizes LAMMPS's communication buffers by its own comm_* members, which it
  // takes from the sub-styles only when it is created (PairHybrid::flags()), before pair_coeff
  // has loaded a model: raise them to this style's widths, or the per-layer exchange overflows.
  if (force->pair && force->pair != this) {
    force->pair->comm_forward = std::max(force->pair->comm_forward, comm_forward);
    force->pair->comm_reverse = std::max(force->pair->comm_reverse, comm_reverse);
    force->pair->comm_reverse_off = std::max(force->pair->comm_reverse_off, comm_reverse_off);
  }
}

double PairClebsch::init_one(int i, int j)
{
  if (!engine_) error->all(FLERR, "Pair style clebsch: pair_coeff * * <model> ... is missing");
  // LAMMPS's cutoffs are symmetric, a model's may not be (NequIP per-edge-type cutoffs are
  // [centre][neighbour]): the neighbor list takes the larger, build_graph() the directed one.
  const int si = type_to_species_[i], sj = type_to_species_[j];
  const int n = atom->ntypes + 1;
  if (static_cast<int>(cutsq_directed_.size()) != n * n) cutsq_directed_.assign(n * n, 0.0);
  if (si < 0 || sj < 0) return 0.0;    // a NULL type (hybrid): no edges of this pair
  const double rij = engine_->r_max(si, sj), rji = engine_->r_max(sj, si);
  cutsq_directed_[i * n + j] = rij * rij;
  cutsq_directed_[j * n + i] = rji * rji;
  return std::max(rij, rji);
}

/* ---------------------------------------------------------------------- */

void PairClebsch::build_graph()
{
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  const double *const *x = atom->x;
  const int *type = atom->type;
  const tagint *tag = atom->tag;
  owners_only_ = comm->nprocs == 1;

  const int ntp1 = atom->ntypes + 1;
  if (owners_only_) {
    // On one rank every ghost is an image of a local atom: find it by tag. Our own table, so
    // that no atom map is required of the input.
    tagint max_tag = 0;
    for (int i = 0; i < nlocal; i++) max_tag = std::max(max_tag, tag[i]);
    owner_of_tag_.assign(static_cast<size_t>(max_tag) + 1, -1);
    for (int i = 0; i < nlocal; i++) owner_of_tag_[tag[i]] = i;
  }
  // Graph nodes: the atoms of the model's types (all of them unless pair_coeff has NULL), local
  // atoms first, then (several ranks) ghosts, each in LAMMPS order.
  const int natoms = owners_only_ ? nlocal : nall;
  node_of_atom_.assign(nall, -1);
  atom_of_node_.clear();
  species_.clear();
  num_local_nodes_ = 0;
  for (int a = 0; a < natoms; a++) {
    const int s = type_to_species_[type[a]];
    if (s < 0) continue;
    if (a < nlocal) num_local_nodes_++;
    node_of_atom_[a] = static_cast<int>(atom_of_node_.size());
    atom_of_node_.push_back(a);
    species_.push_back(s);
  }

  center_.clear();
  neighbor_.clear();
  neighbor_atom_.clear();
  vector_.clear();
  const int inum = list->inum;
  for (int ii = 0; ii < inum; ii++) {
    const int i = list->ilist[ii];
    if (node_of_atom_[i] < 0) continue;
    const int *jlist = list->firstneigh[i];
    const int jnum = list->numneigh[i];
    const size_t first_edge = center_.size();
    for (int jj = 0; jj < jnum; jj++) {
      const int j = jlist[jj] & NEIGHMASK;
      if (type_to_species_[type[j]] < 0) continue;
      const double d[3] = {x[j][0] - x[i][0], x[j][1] - x[i][1], x[j][2] - x[i][2]};
      const double rsq = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
      if (rsq >= cutsq_directed_[type[i] * ntp1 + type[j]]) continue;
      int owner = j;
      if (owners_only_ && j >= nlocal) {
        owner = tag[j] < static_cast<tagint>(owner_of_tag_.size()) ? owner_of_tag_[tag[j]] : -1;
        if (owner < 0)
          error->one(FLERR, "Pair style clebsch: ghost atom {} has no local owner", tag[j]);
      }
      center_.push_back(node_of_atom_[i]);
      neighbor_.push_back(node_of_atom_[owner]);
      neighbor_atom_.push_back(j);
      vector_.insert(vector_.end(), d, d + 3);
    }
    clebsch_pair::order_center_edges(first_edge, center_.size(), neighbor_.data(),
                                     neighbor_atom_.data(), vector_.data(), tag);
  }
}

void PairClebsch::compute(int eflag, int vflag)
{
  ev_init(eflag, vflag);
  // Long runs fail loudly (clebsch_md_checks.h): lost atoms, overlapping atoms and a
  // non-finite model output each stop the run with the atom IDs and the step.
  clebsch_pair::check_lost_atoms(lmp);
  build_graph();
  clebsch_pair::StepEdges edges;
  edges.num_edges = center_.size();
  edges.center = center_.data();
  edges.neighbor_atom = neighbor_atom_.data();
  edges.vector = vector_.data();
  edges.tag = atom->tag;
  clebsch_pair::check_edge_lengths(lmp, edges);

  clebsch::AtomGraph graph;
  graph.num_local = num_local_nodes_;
  graph.num_nodes = species_.size();
  graph.species = species_.data();
  graph.num_edges = center_.size();
  graph.center = center_.data();
  graph.neighbor = neighbor_.data();
  graph.vector = vector_.data();

  clebsch::EngineResult result;
  PairGhostExchange exchange(this);
  try {
    engine_->compute(graph, result, owners_only_ ? nullptr : &exchange);
  } catch (std::exception &e) {
    error->one(FLERR, "Pair style clebsch: {}", with_atom_ids(e.what()));
  }
  const bool per_atom = result.atom_energy.size() == static_cast<size_t>(atom->nlocal);
  clebsch_pair::check_engine_output(lmp, result.energy,
                                    per_atom ? result.atom_energy.data() : nullptr, atom->nlocal,
                                    edges, result.edge_gradient.data());
  tally(result);
}

// The engines name the graph's edges and nodes by index ("edge 12 (centre 3, neighbour 5) ...",
// "atom 7 has species ..."): append the LAMMPS atom IDs of the first one named.
std::string PairClebsch::with_atom_ids(const std::string &message) const
{
  const tagint *tag = atom->tag;
  auto number_after = [&](const std::string &word) -> long long {
    const size_t at = message.find(word);
    if (at == std::string::npos || (at > 0 && std::isalpha(message[at - 1]))) return -1;
    size_t p = at + word.size();
    if (p >= message.size() || !std::isdigit(static_cast<unsigned char>(message[p]))) return -1;
    return std::stoll(message.substr(p));
  };
  const long long e = number_after("edge ");
  if (e >= 0 && e < static_cast<long long>(center_.size())) {
    const double *v = &vector_[3 * e];
    return fmt::format("{} [LAMMPS atom IDs {} and {}, distance {:.6g} A]", message,
                       tag[atom_of_node_[center_[e]]], tag[neighbor_atom_[e]],
                       std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]));
  }
  const long long n = number_after("atom ");
  if (n >= 0 && n < static_cast<long long>(atom_of_node_.size()))
    return fmt::format("{} [LAMMPS atom ID {}]", message, tag[atom_of_node_[n]]);
  return message;
}

// Forces, energies and virials from the engine's per-edge gradients g = dE/dv, v = x_j - x_i:
// F_i += g, F_j -= g, and the edge's virial W = -sym(v (x) g), half to each atom of the edge
// (the LAMMPS convention for pair terms; the halves sum to the global virial).
void PairClebsch::tally(const clebsch::EngineResult &result)
{
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  double **f = atom->f;
  // Ghost contributions go through our own reverse communication when LAMMPS does not sum
  // ghost forces (newton pair off); with newton on LAMMPS's own reverse comm does it.
  const bool own_ghost_tally = !owners_only_ && !force->newton_pair;
  if (own_ghost_tally) ghost_forces_.assign(static_cast<size_t>(nall) * kGhostTallyWidth, 0.0);

  if (eflag_global) eng_vdwl += result.energy;
  if (eflag_atom)
    for (int n = 0; n < num_local_nodes_; n++) eatom[atom_of_node_[n]] += result.atom_energy[n];

  const size_t nedges = center_.size();
  for (size_t e = 0; e < nedges; e++) {
    const double *g = &result.edge_gradient[3 * e];
    const double *v = &vector_[3 * e];
    const int i = atom_of_node_[center_[e]];
    const int j = owners_only_ ? atom_of_node_[neighbor_[e]] : neighbor_atom_[e];
    f[i][0] += g[0];
    f[i][1] += g[1];
    f[i][2] += g[2];
    double *fj = f[j];
    double *vj = vflag_atom ? vatom[j] : nullptr;
    if (own_ghost_tally && j >= nlocal) {
      fj = &ghost_forces_[static_cast<size_t>(j) * kGhostTallyWidth];
      vj = fj + 3;
    }
    fj[0] -= g[0];
    fj[1] -= g[1];
    fj[2] -= g[2];
    if (vflag_either) {
      double w[6];
      clebsch_pair::edge_virial(v, g, w);
      if (vflag_global)
        for (int k = 0; k < 6; k++) virial[k] += w[k];
      if (vflag_atom) {
        for (int k = 0; k < 6; k++) vatom[i][k] += 0.5 * w[k];
        for (int k = 0; k < 6; k++) vj[k] += 0.5 * w[k];
      }
    }
  }
  if (own_ghost_tally) {
    comm_mode_ = CommMode::kGhostTally;
    comm->reverse_comm(this, kGhostTallyWidth);
    comm_mode_ = CommMode::kNone;
  }
}

/* ----------------------------------------------------------------------
   per-layer exchange of node features (forward) and their gradients (reverse)
------------------------------------------------------------------------- */

template <typename T> void PairClebsch::exchange_forward(T *rows, int width)
{
  comm_mode_ = std::is_same<T, double>::value ? CommMode::kFeaturesDouble
                                              : CommMode::kFeaturesFloat;
  comm_rows_ = rows;
  comm_width_ = width;
  comm->forward_comm(this, width);
  comm_mode_ = CommMode::kNone;
}

template <typename T> void PairClebsch::exchange_reverse(T *rows, int width)
{
  comm_mode_ = std::is_same<T, double>::value ? CommMode::kFeaturesDouble
                                              : CommMode::kFeaturesFloat;
  comm_rows_ = rows;
  comm_width_ = width;
  comm->reverse_comm(this, width);
  comm_mode_ = CommMode::kNone;
  const size_t nlocal = num_local_nodes_, nnodes = atom_of_node_.size();
  std::fill(rows + nlocal * width, rows + nnodes * width, T(0));
}

template void PairClebsch::exchange_forward<double>(double *, int);
template void PairClebsch::exchange_forward<float>(float *, int);
template void PairClebsch::exchange_reverse<double>(double *, int);
template void PairClebsch::exchange_reverse<float>(float *, int);

namespace {
template <typename T> T *row(void *rows, int width, int node)
{
  return static_cast<T *>(rows) + static_cast<size_t>(node) * width;
}
}    // namespace

// The exchanged rows are graph nodes; LAMMPS's lists name atoms. An atom of a NULL type (hybrid)
// has no row: it sends zeros and what it receives is dropped.
int PairClebsch::pack_forward_comm(int n, int *list, double *buf, int, int *)
{
  int m = 0;
  for (int k = 0; k < n; k++) {
    const int node = node_of_atom_[list[k]];
    if (node < 0) {
      for (int c = 0; c < comm_width_; c++) buf[m++] = 0.0;
    } else if (comm_mode_ == CommMode::kFeaturesDouble) {
      const double *r = row<double>(comm_rows_, comm_width_, node);
      for (int c = 0; c < comm_width_; c++) buf[m++] = r[c];
    } else {
      const float *r = row<float>(comm_rows_, comm_width_, node);
      for (int c = 0; c < comm_width_; c++) buf[m++] = r[c];
    }
  }
  return m;
}

void PairClebsch::unpack_forward_comm(int n, int first, double *buf)
{
  int m = 0;
  for (int k = first; k < first + n; k++) {
    const int node = node_of_atom_[k];
    if (node < 0) {
      m += comm_width_;
    } else if (comm_mode_ == CommMode::kFeaturesDouble) {
      double *r = row<double>(comm_rows_, comm_width_, node);
      for (int c = 0; c < comm_width_; c++) r[c] = buf[m++];
    } else {
      float *r = row<float>(comm_rows_, comm_width_, node);
      for (int c = 0; c < comm_width_; c++) r[c] = static_cast<float>(buf[m++]);
    }
  }
}

int PairClebsch::pack_reverse_comm(int n, int first, double *buf)
{
  int m = 0;
  for (int k = first; k < first + n; k++) {
    if (comm_mode_ == CommMode::kGhostTally) {
      const double *r = &ghost_forces_[static_cast<size_t>(k) * kGhostTallyWidth];
      for (int c = 0; c < kGhostTallyWidth; c++) buf[m++] = r[c];
      continue;
    }
    const int node = node_of_atom_[k];
    if (node < 0) {
      for (int c = 0; c < comm_width_; c++) buf[m++] = 0.0;
    } else if (comm_mode_ == CommMode::kFeaturesDouble) {
      const double *r = row<double>(comm_rows_, comm_width_, node);
      for (int c = 0; c < comm_width_; c++) buf[m++] = r[c];
    } else {
      const float *r = row<float>(comm_rows_, comm_width_, node);
      for (int c = 0; c < comm_width_; c++) buf[m++] = r[c];
    }
  }
  return m;
}

void PairClebsch::unpack_reverse_comm(int n, int *list, double *buf)
{
  int m = 0;
  for (int k = 0; k < n; k++) {
    const int j = list[k];
    if (comm_mode_ == CommMode::kGhostTally) {
      if (j >= atom->nlocal) {
        // A ghost that is itself sent on by an earlier swap (ghost cutoff beyond one
        // subdomain): keep accumulating in the tally buffer, which that swap packs next.
        double *r = &ghost_forces_[static_cast<size_t>(j) * kGhostTallyWidth];
        for (int c = 0; c < kGhostTallyWidth; c++) r[c] += buf[m++];
        continue;
      }
      for (int c = 0; c < 3; c++) atom->f[j][c] += buf[m++];
      for (int c = 0; c < 6; c++, m++)
        if (vflag_atom) vatom[j][c] += buf[m];
      continue;
    }
    const int node = node_of_atom_[j];
    if (node < 0) {
      m += comm_width_;
    } else if (comm_mode_ == CommMode::kFeaturesDouble) {
      double *r = row<double>(comm_rows_, comm_width_, node);
      for (int c = 0; c < comm_width_; c++) r[c] += buf[m++];
    } else {
      float *r = row<float>(comm_rows_, comm_width_, node);
      for (int c = 0; c < comm_width_; c++) r[c] += static_cast<float>(buf[m++]);
    }
  }
}

// ", head NAME of pbe, r2scan" for the log lines of a multi-head model, else nothing.
std::string PairClebsch::head_text() const
{
  return multi_head_ ? fmt::format(", head {}", active_head_) : std::string();
}

// LAMMPS's memory line has one number per rank: the engine's host and device bytes both count
// (the CUDA engine's per-edge working set dominates on a GPU).
double PairClebsch::memory_usage()
{
  double bytes = Pair::memory_usage();
  if (engine_) {
    const clebsch::EngineMemory held = engine_->memory_usage();
    bytes += static_cast<double>(held.host_bytes) + static_cast<double>(held.device_bytes);
  }
  bytes += sizeof(int) *
      (species_.capacity() + center_.capacity() + neighbor_.capacity() + neighbor_atom_.capacity() +
       owner_of_tag_.capacity() + node_of_atom_.capacity() + atom_of_node_.capacity());
  bytes += sizeof(double) * (vector_.capacity() + ghost_forces_.capacity());
  return bytes;
}
