"""``plugin load`` of Clebsch's plugin in a real LAMMPS run, serial and under MPI."""

import pytest

from lammps_harness import cleanup, run_lammps


@pytest.mark.parametrize("nprocs", [1, 2])
def test_plugin_loads_and_registers_its_command(nprocs):
    run = run_lammps(
        "plugin load ${plugin}\nplugin list\nclebsch_info 128x0e+64x1o+32x2e\n", nprocs=nprocs
    )
    assert run.returncode == 0, run.output
    assert "command style plugin clebsch_info" in run.log
    # 128*1 + 64*3 + 32*5 = 480, computed here, not copied from the plugin's output.
    assert "irreps 128x0e+64x1o+32x2e: dim 480, lmax 2" in run.log
    # Only rank 0 prints.
    assert run.log.count("irreps 128x0e") == 1
    cleanup(run)


def test_bad_argument_gives_a_lammps_error_naming_it():
    run = run_lammps("plugin load ${plugin}\nclebsch_info 16x1q\n")
    assert run.returncode != 0
    assert "ERROR: clebsch_info:" in run.output
    assert "parity must be e, o or y" in run.output


def test_missing_plugin_file_leaves_the_command_unknown():
    # LAMMPS only warns when a plugin file cannot be opened; the first use of a style the plugin
    # would have registered is what fails.
    run = run_lammps(
        "plugin load ${plugin}\nclebsch_info\n", variables={"plugin": "/nonexistent/libx.so"}
    )
    assert "/nonexistent/libx.so" in run.output
    assert run.returncode != 0
    assert "Unknown command" in run.output
