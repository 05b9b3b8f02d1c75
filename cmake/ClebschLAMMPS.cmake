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

# ------------------------------------------------------------------------------------------------
# LAMMPS built with KOKKOS: the plugin then also registers clebsch/kk (pair_clebsch_kokkos.cpp).
# Plugins must be compiled as LAMMPS was: against the same Kokkos, with LMP_KOKKOS and the
# KOKKOS package's precision and layout macros (LAMMPS's installed CMake config does not export
# them), and in C++20 (LAMMPS >= 2025 with Kokkos >= 4.5/5).
#   -DCLEBSCH_LAMMPS_KOKKOS=AUTO|ON|OFF   AUTO: ON when LAMMPS's installed lammps.pc has LMP_KOKKOS
#   -DCLEBSCH_LAMMPS_KOKKOS_PREC=double|mixed|single   LAMMPS's KOKKOS_PREC (default double)
#   -DCLEBSCH_LAMMPS_KOKKOS_LAYOUT=legacy|default      LAMMPS's KOKKOS_LAYOUT (default legacy)
#   -DKokkos_ROOT=<prefix>                the Kokkos LAMMPS was built with (find_package(Kokkos))
# Defines CLEBSCH_LAMMPS_KOKKOS_ENABLED and the interface target Clebsch::lammps_kokkos.
set(CLEBSCH_LAMMPS_KOKKOS "AUTO" CACHE STRING "Build clebsch/kk (LAMMPS has KOKKOS): AUTO, ON, OFF")
set(CLEBSCH_LAMMPS_KOKKOS_PREC "double" CACHE STRING "LAMMPS's KOKKOS_PREC: double, mixed, single")
set(CLEBSCH_LAMMPS_KOKKOS_LAYOUT "legacy" CACHE STRING "LAMMPS's KOKKOS_LAYOUT: legacy, default")

set(CLEBSCH_LAMMPS_KOKKOS_ENABLED OFF)
if(CLEBSCH_LAMMPS_KOKKOS STREQUAL "AUTO")
  # An installed LAMMPS names LMP_KOKKOS in its pkg-config file (its CMake targets do not).
  file(GLOB _lammps_cfg ${LAMMPS_ROOT}/lib*/pkgconfig/*.pc)
  foreach(_cfg ${_lammps_cfg})
    file(STRINGS ${_cfg} _kk REGEX "LMP_KOKKOS")
    if(_kk)
      set(CLEBSCH_LAMMPS_KOKKOS_ENABLED ON)
    endif()
  endforeach()
elseif(CLEBSCH_LAMMPS_KOKKOS)
  set(CLEBSCH_LAMMPS_KOKKOS_ENABLED ON)
endif()

if(CLEBSCH_LAMMPS_KOKKOS_ENABLED)
  if(NOT EXISTS ${LAMMPS_SOURCE_DIR}/KOKKOS/kokkos_type.h)
    message(FATAL_ERROR "LAMMPS_SOURCE_DIR=${LAMMPS_SOURCE_DIR} has no KOKKOS/kokkos_type.h")
  endif()
  # LAMMPS's KOKKOS package renamed its precision types in September 2025 (KK_FLOAT, LAMMPS
  # 20260704); 20250204 still has E_FLOAT/F_FLOAT and double precision only: the style builds
  # against both (CLEBSCH_LAMMPS_KOKKOS_LEGACY_API selects the older types).
  file(STRINGS ${LAMMPS_SOURCE_DIR}/KOKKOS/kokkos_type.h _kk_float REGEX "typedef [a-z]+ KK_FLOAT;")
  set(_kk_legacy OFF)
  if(NOT _kk_float)
    set(_kk_legacy ON)
  endif()
endif()
if(CLEBSCH_LAMMPS_KOKKOS_ENABLED)
  find_package(Kokkos 4.5 REQUIRED CONFIG)
  string(TOUPPER "${CLEBSCH_LAMMPS_KOKKOS_PREC}" _prec)
  if(_prec STREQUAL "DOUBLE")
    set(_prec_setting DOUBLE_DOUBLE)
  elseif(_prec STREQUAL "MIXED")
    set(_prec_setting SINGLE_DOUBLE)
  elseif(_prec STREQUAL "SINGLE")
    set(_prec_setting SINGLE_SINGLE)
  else()
    message(FATAL_ERROR "CLEBSCH_LAMMPS_KOKKOS_PREC must be double, mixed or single, got "
                        "${CLEBSCH_LAMMPS_KOKKOS_PREC}")
  endif()
  string(TOUPPER "${CLEBSCH_LAMMPS_KOKKOS_LAYOUT}" _layout)
  add_library(clebsch_lammps_kokkos INTERFACE)
  add_library(Clebsch::lammps_kokkos ALIAS clebsch_lammps_kokkos)
  target_include_directories(clebsch_lammps_kokkos INTERFACE ${LAMMPS_SOURCE_DIR}/KOKKOS)
  target_link_libraries(clebsch_lammps_kokkos INTERFACE Clebsch::lammps Kokkos::kokkos)
  if(_kk_legacy)
    # No precision or layout options before September 2025: double precision, legacy layout.
    set(_prec_setting "DOUBLE (pre-Sep-2025 KOKKOS API)")
    set(_layout LEGACY)
    target_compile_definitions(clebsch_lammps_kokkos INTERFACE LMP_KOKKOS
                               CLEBSCH_LAMMPS_KOKKOS_LEGACY_API)
  else()
    target_compile_definitions(clebsch_lammps_kokkos INTERFACE LMP_KOKKOS
                               LMP_KOKKOS_${_prec_setting} LMP_KOKKOS_LAYOUT_${_layout})
  endif()
  target_compile_features(clebsch_lammps_kokkos INTERFACE cxx_std_20)
  message(STATUS "Clebsch: LAMMPS has KOKKOS (Kokkos ${Kokkos_VERSION}, devices "
                 "${Kokkos_DEVICES}): building clebsch/kk, precision ${_prec_setting}, "
                 "layout ${_layout}")
endif()
