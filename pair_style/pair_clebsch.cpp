// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Implementation of pair_style clebsch (see pair_clebsch.h for the design).

#include "pair_clebsch.h"

#include "atom.h"
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
#include "clebsch/model/model_reader.h"
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

}    // namespace

/* ---------------------------------------------------------------------- */

PairClebsch::PairClebsch(LAMMPS *lmp) :
    Pair(lmp), precision_name_("fp64"), device_name_("cpu"), cutoff_(0.0)
{
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
                      [edge_batch N]
------------------------------------------------------------------------- */

void PairClebsch::settings(int narg, char **arg)
{
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
      precision_name_ = value;
    } else if (key == "device") {
      if (value != "cpu" && value != "gpu")
        error->all(FLERR, "Pair style clebsch: device must be cpu or gpu, got {}", value);
      device_name_ = value;
    } else if (key == "deterministic") {
      // The host engine is always deterministic (fixed summation order for any thread count);
      // the CUDA engine's convolution accumulates in fixed order (yes) or with atomics (no).
      deterministic_ = utils::logical(FLERR, value, false, lmp) != 0;
    } else if (key == "edge_batch") {
      // The CUDA engines' batch of neighbor pairs (their memory knob); the host engine has no
      // per-pair weights to batch.
      edge_batch_ = utils::bnumeric(FLERR, value, false, lmp);
      if (edge_batch_ < 0)
        error->all(FLERR,
                   "Pair style clebsch: edge_batch must be 0 (automatic) or a number of "
                   "neighbor pairs per batch, got {}",
                   value);
    } else if (key == "charge" || key == "spin") {
      // total_charge / total_spin of models with per-structure embeddings (mace-torch's
      // multiplicity convention: spin 1 = singlet).
      structure_inputs_.emplace_back(key == "charge" ? "total_charge" : "total_spin", value);
    } else {
      error->all(FLERR,
                 "Pair style clebsch: unknown keyword {} (expected precision, device, "
                 "deterministic, edge_batch, charge or spin)",
                 key);
    }
    iarg += 2;
  }
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
  const clebsch::model::Model &model = *loaded;

  std::string known;
  for (const auto &sp : model.species) known += (known.empty() ? "" : " ") + sp.symbol;
  type_to_species_.assign(ntypes + 1, -1);
  for (int t = 1; t <= ntypes; t++) {
    const std::string element = arg[2 + t];
    for (int s = 0; s < model.num_species(); s++)
      if (model.species[s].symbol == element) type_to_species_[t] = s;
    if (type_to_species_[t] < 0)
      error->all(FLERR,
                 "Pair style clebsch: element {} (atom type {}) is not in model {}, "
                 "which has: {}",
                 element, t, path, known);
  }

  try {
    const clebsch::Precision precision = clebsch::precision_from_string(precision_name_);
    if (device_name_ == "gpu")
      engine_ =
          clebsch::load_cuda_engine(model, precision, deterministic_, gpu_ordinal(), edge_batch_);
    else
      engine_ = clebsch::make_host_engine(model, precision, structure_values());
  } catch (std::exception &e) {
    error->all(FLERR, "Pair style clebsch: cannot build the engine: {}", e.what());
  }
  cutoff_ = engine_->r_max();
  for (int i = 1; i <= ntypes; i++)
    for (int j = i; j <= ntypes; j++) setflag[i][j] = 1;

  if (comm->me == 0) {
    const std::string batch =
        device_name_ == "gpu" && edge_batch_ > 0 ? fmt::format(", edge_batch {}", edge_batch_) : "";
    utils::logmesg(lmp, "Clebsch: loaded {} ({} layers, r_max {} A, precision {}, device {}{})\n",
                   path, engine_->num_layers(), cutoff_, precision_name_, device_name_, batch);
    for (int t = 1; t <= ntypes; t++)
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
}

double PairClebsch::init_one(int i, int j)
{
  if (!engine_) error->all(FLERR, "Pair style clebsch: pair_coeff * * <model> ... is missing");
  // LAMMPS's cutoffs are symmetric, a model's may not be (NequIP per-edge-type cutoffs are
  // [centre][neighbour]): the neighbor list takes the larger, build_graph() the directed one.
  const int si = type_to_species_[i], sj = type_to_species_[j];
  const double rij = engine_->r_max(si, sj), rji = engine_->r_max(sj, si);
  const int n = atom->ntypes + 1;
  if (static_cast<int>(cutsq_directed_.size()) != n * n) cutsq_directed_.assign(n * n, 0.0);
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
  const int nnodes = owners_only_ ? nlocal : nall;
  species_.resize(nnodes);
  for (int i = 0; i < nnodes; i++) species_[i] = type_to_species_[type[i]];

  center_.clear();
  neighbor_.clear();
  neighbor_atom_.clear();
  vector_.clear();
  const int inum = list->inum;
  for (int ii = 0; ii < inum; ii++) {
    const int i = list->ilist[ii];
    const int *jlist = list->firstneigh[i];
    const int jnum = list->numneigh[i];
    for (int jj = 0; jj < jnum; jj++) {
      const int j = jlist[jj] & NEIGHMASK;
      const double d[3] = {x[j][0] - x[i][0], x[j][1] - x[i][1], x[j][2] - x[i][2]};
      const double rsq = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
      if (rsq >= cutsq_directed_[type[i] * ntp1 + type[j]]) continue;
      int node = j;
      if (owners_only_ && j >= nlocal) {
        node = tag[j] < static_cast<tagint>(owner_of_tag_.size()) ? owner_of_tag_[tag[j]] : -1;
        if (node < 0)
          error->one(FLERR, "Pair style clebsch: ghost atom {} has no local owner", tag[j]);
      }
      center_.push_back(i);
      neighbor_.push_back(node);
      neighbor_atom_.push_back(j);
      vector_.insert(vector_.end(), d, d + 3);
    }
  }
}

void PairClebsch::compute(int eflag, int vflag)
{
  ev_init(eflag, vflag);
  build_graph();

  clebsch::AtomGraph graph;
  graph.num_local = atom->nlocal;
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
    error->one(FLERR, "Pair style clebsch: {}", e.what());
  }
  tally(result);
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
    for (int i = 0; i < nlocal; i++) eatom[i] += result.atom_energy[i];

  const size_t nedges = center_.size();
  for (size_t e = 0; e < nedges; e++) {
    const double *g = &result.edge_gradient[3 * e];
    const double *v = &vector_[3 * e];
    const int i = center_[e];
    const int j = owners_only_ ? neighbor_[e] : neighbor_atom_[e];
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
  const size_t nlocal = atom->nlocal, nall = nlocal + atom->nghost;
  std::fill(rows + nlocal * width, rows + nall * width, T(0));
}

template void PairClebsch::exchange_forward<double>(double *, int);
template void PairClebsch::exchange_forward<float>(float *, int);
template void PairClebsch::exchange_reverse<double>(double *, int);
template void PairClebsch::exchange_reverse<float>(float *, int);

namespace {
template <typename T> T *row(void *rows, int width, int i)
{
  return static_cast<T *>(rows) + static_cast<size_t>(i) * width;
}
}    // namespace

int PairClebsch::pack_forward_comm(int n, int *list, double *buf, int, int *)
{
  int m = 0;
  for (int k = 0; k < n; k++) {
    if (comm_mode_ == CommMode::kFeaturesDouble) {
      const double *r = row<double>(comm_rows_, comm_width_, list[k]);
      for (int c = 0; c < comm_width_; c++) buf[m++] = r[c];
    } else {
      const float *r = row<float>(comm_rows_, comm_width_, list[k]);
      for (int c = 0; c < comm_width_; c++) buf[m++] = r[c];
    }
  }
  return m;
}

void PairClebsch::unpack_forward_comm(int n, int first, double *buf)
{
  int m = 0;
  for (int k = first; k < first + n; k++) {
    if (comm_mode_ == CommMode::kFeaturesDouble) {
      double *r = row<double>(comm_rows_, comm_width_, k);
      for (int c = 0; c < comm_width_; c++) r[c] = buf[m++];
    } else {
      float *r = row<float>(comm_rows_, comm_width_, k);
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
    } else if (comm_mode_ == CommMode::kFeaturesDouble) {
      const double *r = row<double>(comm_rows_, comm_width_, k);
      for (int c = 0; c < comm_width_; c++) buf[m++] = r[c];
    } else {
      const float *r = row<float>(comm_rows_, comm_width_, k);
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
    } else if (comm_mode_ == CommMode::kFeaturesDouble) {
      double *r = row<double>(comm_rows_, comm_width_, j);
      for (int c = 0; c < comm_width_; c++) r[c] += buf[m++];
    } else {
      float *r = row<float>(comm_rows_, comm_width_, j);
      for (int c = 0; c < comm_width_; c++) r[c] += static_cast<float>(buf[m++]);
    }
  }
}

double PairClebsch::memory_usage()
{
  double bytes = Pair::memory_usage();
  bytes += sizeof(int) *
      (species_.capacity() + center_.capacity() + neighbor_.capacity() + neighbor_atom_.capacity() +
       owner_of_tag_.capacity());
  bytes += sizeof(double) * (vector_.capacity() + ghost_forces_.capacity());
  return bytes;
}
