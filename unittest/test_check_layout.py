# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# check_layout.py must fail on each kind of violation it exists for: run on a copy of the real
# tree with one violation planted at a time, it reports exactly that one (and passes on the copy
# without it). Standard library only (python3 -m unittest), like the checker.
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parent.parent
CHECKER = REPO / "unittest" / "check_layout.py"

VIOLATIONS = [
    # src/ reaching up into kernels/
    ("src/o3/irreps.h", '#include "clebsch/cuda/device/dtype.h"', "src/o3/ may use only"),
    # a lower src/ folder including a higher one
    ("src/o3/irreps.h", '#include "clebsch/engine/engine.h"', "src/o3/ may use only"),
    # a project header without the prefix
    ("src/nn/gate.h", '#include "irreps.h"', 'included as "clebsch/<folder>/..."'),
    # CUDA in src/
    ("src/nn/gate.h", "#include <cuda.h>", "may not include this system header"),
    # MPI in kernels/
    ("kernels/device/dtype.h", "#include <mpi.h>", "may not include this system header"),
    # the device layer reaching the generator
    (
        "kernels/device/dtype.h",
        '#include "clebsch/cuda/generator/tp_problem.h"',
        "kernels/device/ may use only",
    ),
]


class CheckLayout(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tree = pathlib.Path(self._tmp.name)
        for folder in ("src", "kernels", "pair_style"):
            shutil.copytree(REPO / folder, self.tree / folder)
        (self.tree / "unittest").mkdir()
        shutil.copy(CHECKER, self.tree / "unittest" / "check_layout.py")

    def tearDown(self):
        self._tmp.cleanup()

    def run_checker(self):
        return subprocess.run(
            [sys.executable, str(self.tree / "unittest" / "check_layout.py")],
            capture_output=True,
            text=True,
        )

    def test_the_copy_passes(self):
        result = self.run_checker()
        self.assertEqual(result.returncode, 0, result.stdout)

    def test_each_violation_is_reported(self):
        for rel, line, expected in VIOLATIONS:
            with self.subTest(rel=rel, line=line):
                path = self.tree / rel
                original = path.read_text()
                path.write_text(
                    original.replace("#pragma once\n", "#pragma once\n" + line + "\n", 1)
                )
                result = self.run_checker()
                path.write_text(original)
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(expected, result.stdout)
                self.assertIn(rel, result.stdout)

    def test_a_file_over_the_limit_is_reported(self):
        path = self.tree / "src" / "support" / "error.h"
        path.write_text(path.read_text() + "//\n" * 900)
        result = self.run_checker()
        self.assertEqual(result.returncode, 1)
        self.assertIn("src/support/error.h: ", result.stdout)
        self.assertIn("more than 800", result.stdout)


if __name__ == "__main__":
    unittest.main()
