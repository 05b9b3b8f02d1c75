"""Configure checks of the test suites' dependencies (CTest ``configure_checks``).

Each case configures this source tree afresh with the dependencies of the enclosing build (read
from its CMakeCache.txt) but one taken away, and checks what CMake does:

- the CUDA toolkit hidden (what a machine without /usr/local/cuda sees): the configure passes,
  says the CUDA engine is not built, and ctest reports the placeholder ``skipped_cuda_engine``
  as skipped with the reason;
- the same with ``CLEBSCH_REQUIRE_ALL=ON`` (CI): the configure fails and names the CUDA engine;
- the e3nn interpreter unset with ``CLEBSCH_REQUIRE_ALL=ON``: it fails and names the e3nn suite;
  without the switch it passes and reports that suite as skipped.

Usage: check_configure.py --source DIR --cache CMakeCache.txt --work DIR [--generator NAME]
"""

import argparse
import pathlib
import re
import shutil
import subprocess
import sys

# What the enclosing build was given, passed on unchanged unless a case overrides it.
CARRIED = [
    "CLEBSCH_PYTHON",
    "CLEBSCH_PYTHON_MACE",
    "CLEBSCH_PYTHON_NEQUIP",
    "LAMMPS_SOURCE_DIR",
    "LAMMPS_ROOT",
    "CLEBSCH_KOKKOS_LMP",
    "CLEBSCH_KOKKOS_MPIEXEC",
    "CLEBSCH_KOKKOS_PLUGIN",
    "CMAKE_CXX_COMPILER_LAUNCHER",
]
NO_CUDA = ["-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON"]


def read_cache(path):
    values = {}
    for line in pathlib.Path(path).read_text().splitlines():
        m = re.match(r"^([A-Za-z_0-9]+):[A-Z]+=(.*)$", line)
        if m:
            values[m.group(1)] = m.group(2)
    return values


def configure(args, name, extra):
    build = pathlib.Path(args.work) / name
    shutil.rmtree(build, ignore_errors=True)
    cache = read_cache(args.cache)
    cmd = ["cmake", "-S", args.source, "-B", str(build), "-G", args.generator]
    cmd += [f"-D{k}={cache[k]}" for k in CARRIED if cache.get(k)]
    cmd += extra
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout, build


def expect(condition, case, what, output):
    if not condition:
        print(f"FAIL {case}: {what}\n--- output ---\n{output[-4000:]}")
        sys.exit(1)
    print(f"ok   {case}: {what}")


def reported_skipped(build, test):
    proc = subprocess.run(
        ["ctest", "--test-dir", str(build), "-R", f"^{test}$", "--output-on-failure", "-V"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc.returncode == 0 and "Skipped" in proc.stdout and "SKIPPED: " in proc.stdout, (
        proc.stdout
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--cache", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--generator", default="Ninja")
    args = p.parse_args()

    rc, out, build = configure(args, "no-cuda", NO_CUDA + ["-DCLEBSCH_REQUIRE_ALL=OFF"])
    expect(rc == 0, "no-cuda", "configures without a CUDA toolkit", out)
    expect("the cuda_engine tests are not built" in out, "no-cuda", "says why", out)
    ok, text = reported_skipped(build, "skipped_cuda_engine")
    expect(ok, "no-cuda", "ctest reports the CUDA engine tests as skipped, with the reason", text)
    listed = subprocess.run(
        ["ctest", "--test-dir", str(build), "-N"], stdout=subprocess.PIPE, text=True
    ).stdout
    expect("test_kernels" not in listed, "no-cuda", "no CUDA engine test is registered", listed)

    rc, out, _ = configure(args, "require-all-no-cuda", NO_CUDA + ["-DCLEBSCH_REQUIRE_ALL=ON"])
    expect(rc != 0, "require-all-no-cuda", "the configure fails", out)
    expect(
        "CLEBSCH_REQUIRE_ALL is on and the cuda_engine tests cannot be built" in out,
        "require-all-no-cuda",
        "the error names the CUDA engine tests",
        out,
    )

    rc, out, _ = configure(
        args, "require-all-no-e3nn", ["-DCLEBSCH_PYTHON=", "-DCLEBSCH_REQUIRE_ALL=ON"]
    )
    expect(rc != 0, "require-all-no-e3nn", "the configure fails", out)
    expect(
        "the e3nn_reference tests cannot be built" in out,
        "require-all-no-e3nn",
        "the error names the e3nn suite",
        out,
    )
    rc, out, build = configure(args, "no-e3nn", ["-DCLEBSCH_PYTHON=", "-DCLEBSCH_REQUIRE_ALL=OFF"])
    expect(rc == 0, "no-e3nn", "configures without the e3nn interpreter", out)
    ok, text = reported_skipped(build, "skipped_e3nn_reference")
    expect(ok, "no-e3nn", "ctest reports the e3nn suite as skipped, with the reason", text)
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
