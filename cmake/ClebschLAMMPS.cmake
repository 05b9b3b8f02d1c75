# Locate LAMMPS for the plugin, or build one from Debian's source package.
#
# A user with a LAMMPS of their own points to it:
#   -DLAMMPS_SOURCE_DIR=<lammps>/src      the source tree (plugins need lammpsplugin.h, version.h)
#   -DLAMMPS_ROOT=<prefix or build dir>   where liblammps.so (and bin/lmp) are
# Otherwise (CLEBSCH_BUILD_LAMMPS=ON, the default) scripts/build-lammps.sh builds LAMMPS once,
# shared with PLUGIN and MPI, into the cache (~/.cache/clebsch), and that one is used.
#
# Defines the imported target Clebsch::lammps and the variable LAMMPS_EXECUTABLE.

option(CLEBSCH_BUILD_LAMMPS "Build LAMMPS from Debian's source package when none is given" ON)
set(LAMMPS_SOURCE_DIR "" CACHE PATH "LAMMPS src/ directory (with lammpsplugin.h)")
set(LAMMPS_ROOT "" CACHE PATH "LAMMPS install prefix or build directory holding liblammps")
set(LAMMPS_SIZES "smallbig" CACHE STRING "Integer sizes LAMMPS was built with (smallbig|bigbig)")

if(NOT LAMMPS_SOURCE_DIR AND NOT LAMMPS_ROOT)
  if(NOT CLEBSCH_BUILD_LAMMPS)
    message(FATAL_ERROR "No LAMMPS given: set LAMMPS_SOURCE_DIR and LAMMPS_ROOT, "
                        "or enable CLEBSCH_BUILD_LAMMPS")
  endif()
  message(STATUS "Clebsch: building (or reusing) LAMMPS via scripts/build-lammps.sh")
  execute_process(COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/build-lammps.sh
                  OUTPUT_VARIABLE _lammps_out RESULT_VARIABLE _lammps_rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _lammps_rc EQUAL 0)
    message(FATAL_ERROR "scripts/build-lammps.sh failed (exit ${_lammps_rc})")
  endif()
  string(REGEX REPLACE ".*\n" "" _lammps_prefix "${_lammps_out}")
  set(LAMMPS_SOURCE_DIR ${_lammps_prefix}/src/src CACHE PATH "" FORCE)
  set(LAMMPS_ROOT ${_lammps_prefix}/install CACHE PATH "" FORCE)
endif()

if(NOT EXISTS ${LAMMPS_SOURCE_DIR}/lammpsplugin.h)
  message(FATAL_ERROR "LAMMPS_SOURCE_DIR=${LAMMPS_SOURCE_DIR} has no lammpsplugin.h: "
                      "point it to the src/ folder of a LAMMPS source tree")
endif()
find_library(LAMMPS_LIBRARY NAMES lammps lammps_mpi
             HINTS ${LAMMPS_ROOT} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
if(NOT LAMMPS_LIBRARY)
  message(FATAL_ERROR "No liblammps under LAMMPS_ROOT=${LAMMPS_ROOT}: build LAMMPS with "
                      "-DBUILD_SHARED_LIBS=ON -DPKG_PLUGIN=ON")
endif()
find_program(LAMMPS_EXECUTABLE NAMES lmp lmp_mpi HINTS ${LAMMPS_ROOT} PATH_SUFFIXES bin
             NO_DEFAULT_PATH)

set(MPI_CXX_SKIP_MPICXX TRUE)
find_package(MPI REQUIRED COMPONENTS CXX)

# A plain (not IMPORTED) interface library, so LAMMPS's headers come as -I, not -isystem: the
# plugin must see LAMMPS's "error.h" before the core library's (see pair_style/CMakeLists.txt).
add_library(clebsch_lammps INTERFACE)
add_library(Clebsch::lammps ALIAS clebsch_lammps)
target_include_directories(clebsch_lammps INTERFACE ${LAMMPS_SOURCE_DIR})
target_link_libraries(clebsch_lammps INTERFACE ${LAMMPS_LIBRARY} MPI::MPI_CXX)
string(TOUPPER ${LAMMPS_SIZES} _sizes)
target_compile_definitions(clebsch_lammps INTERFACE LAMMPS_${_sizes})
message(STATUS "Clebsch: LAMMPS headers ${LAMMPS_SOURCE_DIR}, library ${LAMMPS_LIBRARY}, "
               "executable ${LAMMPS_EXECUTABLE}")
