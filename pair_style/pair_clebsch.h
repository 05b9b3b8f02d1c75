// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// pair_style clebsch: MACE and NequIP models exported to Clebsch's file format, evaluated by the
// native engine (src/ on the host). Glue only: settings() parses keywords, coeff() loads the model
// and maps LAMMPS types to model species by element name, init_style() requests a full neighbor
// list and checks units and atom IDs, compute() builds the atomic graph, runs the engine and
// turns its per-edge gradients into forces, energies and virials (global and per atom).
//
// On one MPI rank, ghost atoms are replaced by their owners (found by tag), so no work is done
// twice and nothing is exchanged. On several ranks, ghosts are graph nodes whose features the
// engine receives after every layer through forward communication, and whose gradients it
// returns through reverse communication (GhostExchange below).

#ifdef PAIR_CLASS
// clang-format off
PairStyle(clebsch,PairClebsch);
// clang-format on
#else

#ifndef LMP_PAIR_CLEBSCH_H
#define LMP_PAIR_CLEBSCH_H

#include "pair.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace clebsch {
class Engine;
struct EngineResult;
namespace model {
  struct Model;
}
}    // namespace clebsch

namespace LAMMPS_NS {

class PairClebsch : public Pair {
 public:
  PairClebsch(class LAMMPS *);
  ~PairClebsch() override;

  void compute(int, int) override;
  void settings(int, char **) override;
  void coeff(int, char **) override;
  void init_style() override;
  double init_one(int, int) override;
  double memory_usage() override;

  int pack_forward_comm(int, int *, double *, int, int *) override;
  void unpack_forward_comm(int, int, double *) override;
  int pack_reverse_comm(int, int, double *) override;
  void unpack_reverse_comm(int, int *, double *) override;

  /// Forward/reverse communication of a row-major per-atom buffer of @p width values (the
  /// engine's node features or their gradients), used between message-passing layers.
  template <typename T> void exchange_forward(T *rows, int width);
  template <typename T> void exchange_reverse(T *rows, int width);

 protected:
  /// structure_inputs_ with the variables evaluated (error->all on a bad one).
  std::vector<std::pair<std::string, double>> structure_values();
  void allocate();
  /// The GPU `device gpu` runs on: -1 lets each MPI rank take its node-local rank's GPU; the
  /// Kokkos style names the device Kokkos itself runs on.
  virtual int gpu_ordinal() const { return -1; }
  void build_graph();
  void tally(const clebsch::EngineResult &result);
  /// Builds engine_ for @p model (read again from model_path_ when null) with the current
  /// keywords: coeff(), and settings() when a re-issued pair_style changes a keyword. Selects the
  /// head keyword's head of a multi-head model in @p model first (error->all naming the heads).
  void build_engine(clebsch::model::Model *model = nullptr);
  /// An engine error with the LAMMPS atom IDs of the edge or atom it names (the engine counts
  /// graph nodes and edges, which a user cannot find in a data file).
  std::string with_atom_ids(const std::string &message) const;

  // The keywords of pair_style; a re-issued pair_style starts again from the defaults.
  struct Keywords {
    std::string precision = "fp64";
    std::string device = "cpu";
    long long edge_batch = 0;      // device gpu: neighbor pairs per batch (0: automatic)
    bool deterministic = false;    // device gpu: fixed-order accumulation (doc default no)
    std::string head;              // multi-head MACE: the head to evaluate ("": the default)
    int radial_spline = 0;         // radial spline N: intervals of the tables (0: exact MLP)
    bool operator==(const Keywords &o) const
    {
      return precision == o.precision && device == o.device && edge_batch == o.edge_batch &&
          deterministic == o.deterministic && head == o.head && radial_spline == o.radial_spline;
    }
  };
  bool defaults_taken_ = false;
  Keywords defaults_;    // as the constructor left them (clebsch/kk on a GPU: device gpu)

  std::string precision_name_;
  std::string device_name_;
  long long edge_batch_ = 0;      // device gpu: neighbor pairs per batch (0: automatic)
  bool deterministic_ = false;    // device gpu: fixed-order accumulation (doc default no)
  std::string head_name_;         // head keyword ("": the model's default head)
  int radial_spline_ = 0;         // radial spline N (0: radial exact, the default)
  std::string active_head_;       // the head the engine evaluates (empty for NequIP)
  bool multi_head_ = false;       // the model has several heads (the log names the head)
  std::string head_text() const;
  // Per-structure model inputs (MACE embedding_specs), keyword -> value or v_name (an
  // equal-style variable, evaluated when pair_coeff builds the engine).
  std::vector<std::pair<std::string, std::string>> structure_inputs_;
  std::unique_ptr<clebsch::Engine> engine_;
  std::string model_path_;              // the model pair_coeff loaded
  std::vector<int> type_to_species_;    // [ntypes+1], -1 for unmapped (NULL)
  std::vector<int> node_of_atom_;       // [nall] graph node of each atom, -1 for NULL types
  std::vector<int> atom_of_node_;       // [nnodes] LAMMPS index of each graph node
  int num_local_nodes_ = 0;
  std::vector<double> cutsq_directed_;    // [ntypes+1][ntypes+1], [centre type][neighbor type]
  std::vector<int> owner_of_tag_;         // one rank: local index of each atom ID
  double cutoff_;

  // The graph of the current step (node index = LAMMPS atom index, or owner on one rank).
  std::vector<int> species_, center_, neighbor_;
  std::vector<double> vector_;
  std::vector<int> neighbor_atom_;    // LAMMPS index of each edge's neighbor (ghost or local)
  bool owners_only_ = true;           // true: ghosts replaced by their owners (one rank)

  // Communication state: what pack/unpack move during the current exchange.
  enum class CommMode { kNone, kFeaturesDouble, kFeaturesFloat, kGhostTally };
  CommMode comm_mode_ = CommMode::kNone;
  void *comm_rows_ = nullptr;
  int comm_width_ = 0;
  std::vector<double> ghost_forces_;    // [nall][3 force + 6 virial] when newton pair is off
};

}    // namespace LAMMPS_NS

#endif
#endif
