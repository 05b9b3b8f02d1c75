# CPU benchmark of the MACE host engine: bench_mace_cpu (bench_mace_cpu.cpp) times energy + forces
# of a structure file per precision; bench_mace_cpu.py builds the models and structures and runs
# it beside mace-torch. It needs no CUDA, so it is included from the top-level CMakeLists.txt
# (outside the CLEBSCH_ENABLE_CUDA block):
#   include(bench/mace_cpu.cmake)
add_executable(bench_mace_cpu ${CMAKE_CURRENT_LIST_DIR}/bench_mace_cpu.cpp)
target_link_libraries(bench_mace_cpu PRIVATE clebsch_core nlohmann_json::nlohmann_json)
target_compile_options(bench_mace_cpu PRIVATE -Wall -Wextra)
