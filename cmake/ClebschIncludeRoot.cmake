# The project's one include root: <build>/include/clebsch/ holds a link to each folder of src/
# ("clebsch/o3/irreps.h" is src/o3/irreps.h) and one to kernels/ ("clebsch/cuda/device/
# cuda_driver.h" is kernels/device/cuda_driver.h, the folder of namespace clebsch::cuda). Every
# include of a Clebsch header carries the prefix, so none can be taken for a LAMMPS header of the
# same name (both have an error.h). The links are relative, so a copied source+build tree keeps
# them. CLEBSCH_SOURCE_ROOT is the repository (the extension in torch/, built alone by pip, sets it
# to its parent folder); it defaults to the project's source folder.
if(NOT CLEBSCH_SOURCE_ROOT)
  set(CLEBSCH_SOURCE_ROOT ${PROJECT_SOURCE_DIR})
endif()
set(CLEBSCH_INCLUDE_ROOT ${PROJECT_BINARY_DIR}/include)
set(_clebsch_prefix_dir ${CLEBSCH_INCLUDE_ROOT}/clebsch)
file(MAKE_DIRECTORY ${_clebsch_prefix_dir})

function(_clebsch_link target name)
  set(link ${_clebsch_prefix_dir}/${name})
  file(RELATIVE_PATH rel ${_clebsch_prefix_dir} ${target})
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} current)
    if(current STREQUAL rel)
      return()
    endif()
    file(REMOVE ${link})
  endif()
  file(CREATE_LINK ${rel} ${link} SYMBOLIC)
endfunction()

# src/'s concept folders, and kernels/ as clebsch/cuda.
set(CLEBSCH_CORE_FOLDERS support o3 nn model engine)
foreach(folder ${CLEBSCH_CORE_FOLDERS})
  _clebsch_link(${CLEBSCH_SOURCE_ROOT}/src/${folder} ${folder})
endforeach()
_clebsch_link(${CLEBSCH_SOURCE_ROOT}/kernels cuda)
