// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The structure side of the MACE model benchmarks (bench_mace_cpu, bench_mace_model): a periodic
// structure read from the small safetensors file the Python drivers write (positions [N,3],
// cell [3,3] rows = lattice vectors, species [N] as float64), and its full neighbour list by
// binning, in the engine's convention (edge e: center receives, neighbor sends, vector =
// x[neighbor] - x[center] with the periodic image shift). Header-only: the two programs are
// built in different configurations (with and without CUDA).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"

namespace clebsch::bench {

struct Structure {
  std::vector<double> positions, cell;
  std::vector<int> species;
  std::size_t n = 0;
};

// Periodic full neighbour list by binning (cell no shorter than the cutoff in each direction is
// not required: images are enumerated as far as the cutoff needs).
struct Graph {
  std::vector<int> center, neighbor;
  std::vector<double> vector;
};

inline Graph neighbour_list(const Structure& s, double cutoff) {
  // Fractional coordinates; image ranges from the plane spacings.
  const double* c = s.cell.data();
  auto cross = [](const double* a, const double* b, double* o) {
    o[0] = a[1] * b[2] - a[2] * b[1];
    o[1] = a[2] * b[0] - a[0] * b[2];
    o[2] = a[0] * b[1] - a[1] * b[0];
  };
  double n0[3], n1[3], n2[3];
  cross(c + 3, c + 6, n0);
  cross(c + 6, c + 0, n1);
  cross(c + 0, c + 3, n2);
  const double vol = c[0] * n0[0] + c[1] * n0[1] + c[2] * n0[2];
  const double* normals[3] = {n0, n1, n2};
  int nbin[3], reps[3];
  for (int d = 0; d < 3; ++d) {
    const double nn = std::sqrt(normals[d][0] * normals[d][0] + normals[d][1] * normals[d][1] +
                                normals[d][2] * normals[d][2]);
    const double height = std::abs(vol) / nn;
    nbin[d] = std::max(1, static_cast<int>(height / cutoff));
    reps[d] = static_cast<int>(std::ceil(cutoff / (height / nbin[d])));
  }
  // Inverse cell (rows of inv^T are normals / vol).
  std::vector<double> frac(3 * s.n);
  for (std::size_t i = 0; i < s.n; ++i)
    for (int d = 0; d < 3; ++d) {
      const double* p = s.positions.data() + 3 * i;
      double f = (p[0] * normals[d][0] + p[1] * normals[d][1] + p[2] * normals[d][2]) / vol;
      f -= std::floor(f);
      frac[3 * i + d] = f;
    }
  const int nb = nbin[0] * nbin[1] * nbin[2];
  std::vector<std::vector<int>> bins(nb);
  auto bin_of = [&](std::size_t i, int d) {
    return std::min(nbin[d] - 1, static_cast<int>(frac[3 * i + d] * nbin[d]));
  };
  for (std::size_t i = 0; i < s.n; ++i)
    bins[(bin_of(i, 0) * nbin[1] + bin_of(i, 1)) * nbin[2] + bin_of(i, 2)].push_back(int(i));
  Graph g;
  const double rc2 = cutoff * cutoff;
  for (std::size_t i = 0; i < s.n; ++i) {
    const int b[3] = {bin_of(i, 0), bin_of(i, 1), bin_of(i, 2)};
    for (int dx = -reps[0]; dx <= reps[0]; ++dx)
      for (int dy = -reps[1]; dy <= reps[1]; ++dy)
        for (int dz = -reps[2]; dz <= reps[2]; ++dz) {
          const int d[3] = {dx, dy, dz};
          int bb[3], shift[3];
          for (int k = 0; k < 3; ++k) {
            const int raw = b[k] + d[k];
            shift[k] = static_cast<int>(std::floor(double(raw) / nbin[k]));
            bb[k] = raw - shift[k] * nbin[k];
          }
          for (int j : bins[(bb[0] * nbin[1] + bb[1]) * nbin[2] + bb[2]]) {
            double v[3];
            for (int k = 0; k < 3; ++k) {
              // x = frac @ cell; image shift adds shift @ cell.
              double fj = frac[3 * j + 0] + shift[0] - frac[3 * i + 0];
              double fk = frac[3 * j + 1] + shift[1] - frac[3 * i + 1];
              double fl = frac[3 * j + 2] + shift[2] - frac[3 * i + 2];
              v[k] = fj * c[k] + fk * c[3 + k] + fl * c[6 + k];
            }
            const double r2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
            if (r2 >= rc2 || r2 == 0) continue;
            g.center.push_back(int(i));
            g.neighbor.push_back(j);
            g.vector.insert(g.vector.end(), v, v + 3);
          }
        }
  }
  return g;
}

inline Structure read_structure(const std::string& path) {
  const auto f = clebsch::SafetensorsFile::read(path);
  Structure s;
  s.positions = f.to_double("positions");
  s.cell = f.to_double("cell", {3, 3});
  const auto sp = f.to_double("species");
  s.n = sp.size();
  if (s.positions.size() != 3 * s.n)
    throw clebsch::Error(path + ": positions and species disagree");
  for (double x : sp) s.species.push_back(static_cast<int>(x));
  return s;
}

}  // namespace clebsch::bench
