// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Irreps against the real e3nn o3.Irreps (reference/ref_irreps.py): for every string e3nn
// accepts, the canonical text, dim, num_irreps, lmax, offsets, items, sort() (irreps, p, inv),
// simplify(), regroup() and remove_zero_multiplicities(); every string e3nn rejects must be
// rejected too; Irreps.spherical_harmonics.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"
#include "clebsch/support/error.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::load_reference;

const nlohmann::json& reference() {
  static const nlohmann::json ref = load_reference("irreps");
  return ref;
}

TEST(E3nnIrreps, ParsesLikeE3nn) {
  for (const auto& c : reference().at("accepted")) {
    const std::string text = c.at("text");
    SCOPED_TRACE("\"" + text + "\"");
    const Irreps irreps(text);
    EXPECT_EQ(irreps.str(), c.at("str").get<std::string>());
    EXPECT_EQ(irreps.dim(), c.at("dim").get<int>());
    EXPECT_EQ(irreps.num_irreps(), c.at("num_irreps").get<int>());
    EXPECT_EQ(irreps.offsets(), c.at("offsets").get<std::vector<int>>());
    const auto items = c.at("items").get<std::vector<std::vector<int>>>();
    ASSERT_EQ(irreps.size(), items.size());
    for (std::size_t i = 0; i < items.size(); ++i)
      EXPECT_EQ(irreps[i], (MulIrrep{items[i][0], Irrep(items[i][1], items[i][2])}));
  }
}

TEST(E3nnIrreps, LmaxMatchesE3nn) {
  for (const auto& c : reference().at("accepted")) {
    const std::string text = c.at("text");
    SCOPED_TRACE("\"" + text + "\"");
    const Irreps irreps(text);
    if (c.at("lmax").is_null()) {
      EXPECT_THROW(irreps.lmax(), Error);  // e3nn raises: no irrep with a non-zero multiplicity
    } else {
      EXPECT_EQ(irreps.lmax(), c.at("lmax").get<int>());
    }
  }
}

TEST(E3nnIrreps, SortSimplifyAndRegroupMatchE3nn) {
  for (const auto& c : reference().at("accepted")) {
    const std::string text = c.at("text");
    SCOPED_TRACE("\"" + text + "\"");
    const Irreps irreps(text);
    const auto s = irreps.sort();
    EXPECT_EQ(s.irreps.str(), c.at("sorted").get<std::string>());
    EXPECT_EQ(s.p, c.at("p").get<std::vector<int>>());
    EXPECT_EQ(s.inv, c.at("inv").get<std::vector<int>>());
    EXPECT_EQ(irreps.simplify().str(), c.at("simplify").get<std::string>());
    EXPECT_EQ(irreps.regroup().str(), c.at("regroup").get<std::string>());
    EXPECT_EQ(irreps.remove_zero_multiplicities().str(),
              c.at("remove_zero_multiplicities").get<std::string>());
  }
}

TEST(E3nnIrreps, RejectsWhatE3nnRejects) {
  for (const auto& t : reference().at("rejected")) {
    const std::string text = t;
    EXPECT_THROW(static_cast<void>(Irreps(text)), Error) << "\"" << text << "\"";
  }
}

TEST(E3nnIrreps, SphericalHarmonicsIrrepsMatchE3nn) {
  for (const auto& c : reference().at("spherical_harmonics"))
    EXPECT_EQ(Irreps::spherical_harmonics(c.at("lmax").get<int>(), c.at("p").get<int>()).str(),
              c.at("str").get<std::string>())
        << "lmax " << c.at("lmax") << " p " << c.at("p");
}

}  // namespace
}  // namespace clebsch
