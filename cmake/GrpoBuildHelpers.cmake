# Build helpers used only inside the project tree (the installed package has its own:
# GrpoPlugin.cmake).

function(grpo_enable_ccache)
  if(NOT GRPO_USE_CCACHE)
    return()
  endif()
  find_program(GRPO_CCACHE_PROGRAM ccache)
  if(GRPO_CCACHE_PROGRAM)
    # ccache caches PCH-using translation units only with these sloppiness settings; they are
    # passed on every compile (an ENV set here would reach the configure step only).
    set(CMAKE_CXX_COMPILER_LAUNCHER
        "${CMAKE_COMMAND};-E;env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;${GRPO_CCACHE_PROGRAM}"
        PARENT_SCOPE)
    message(STATUS "grpo: using ccache at ${GRPO_CCACHE_PROGRAM}")
  endif()
endfunction()

# Precompiled header for targets that include LibTorch headers in several translation units.
function(grpo_torch_pch target)
  if(GRPO_USE_PCH)
    target_precompile_headers(${target} PRIVATE <ATen/ATen.h> <torch/version.h>)
  endif()
endfunction()

# ---- LibTorch: which one, its ABI, CUDA and NCCL ----------------------------------------------
#
# Which LibTorch find_package(Torch) finds:
#   1. the one the user names: Torch_DIR, Torch_ROOT, or a CMAKE_PREFIX_PATH entry holding a
#      TorchConfig.cmake (variable or environment);
#   2. else, when GRPO_WITH_CUDA is AUTO or ON, the LibTorch inside an installed PyTorch that has
#      CUDA (torch.utils.cmake_prefix_path of GRPO_TORCH_PYTHON, default the python3 on PATH),
#      put first on CMAKE_PREFIX_PATH. In AUTO it is used only when a CUDA compiler exists too
#      (a CUDA LibTorch's own TorchConfig.cmake needs the toolkit, and without nvcc AUTO would
#      not build the CUDA code paths anyway);
#   3. else whatever the default search finds: on a CPU machine, the system's (Debian's
#      libtorch-dev), exactly as without this step.
# Once found, Torch_DIR is cached, so a reconfigure of the same build folder keeps its LibTorch.

# TRUE in `out` when one of the folders after it holds a TorchConfig.cmake where find_package
# looks under a prefix (<prefix>/, <prefix>/Torch*/, <prefix>/{lib*,lib/<arch>,share}/cmake/Torch*/, ...).
function(_grpo_prefixes_hold_torch out)
  set(_found FALSE)
  foreach(_prefix IN LISTS ARGN)
    if(_prefix STREQUAL "")
      continue()
    endif()
    file(GLOB _configs LIST_DIRECTORIES false
      "${_prefix}/TorchConfig.cmake" "${_prefix}/[Cc][Mm]ake/TorchConfig.cmake"
      "${_prefix}/Torch*/TorchConfig.cmake" "${_prefix}/Torch*/[Cc][Mm]ake/TorchConfig.cmake"
      "${_prefix}/share/cmake/Torch*/TorchConfig.cmake" "${_prefix}/share/Torch*/TorchConfig.cmake"
      "${_prefix}/lib*/cmake/Torch*/TorchConfig.cmake" "${_prefix}/lib*/Torch*/TorchConfig.cmake"
      "${_prefix}/lib/*/cmake/Torch*/TorchConfig.cmake")
    if(_configs)
      set(_found TRUE)
      break()
    endif()
  endforeach()
  set(${out} ${_found} PARENT_SCOPE)
endfunction()

# The error for a LibTorch built with the pre-C++11 libstdc++ ABI. `where` names it.
function(_grpo_old_abi_error where)
  message(FATAL_ERROR
    "grpo: ${where} is built with the pre-C++11 libstdc++ ABI (_GLIBCXX_USE_CXX11_ABI=0), as "
    "pip's PyTorch wheels before 2.7 are. grpo also links yaml-cpp, spdlog and Boost from the "
    "system, which use the C++11 ABI, so the build could not link (undefined references to "
    "std::__cxx11::basic_string and the like). Use a LibTorch with the C++11 ABI instead:\n"
    "  - download the \"cxx11 ABI\" LibTorch zip for your CUDA version from "
    "https://pytorch.org/get-started/locally/ (Package: LibTorch, Language: C++/Java), unzip it and "
    "configure a fresh build folder with -DTorch_DIR=<unzipped>/libtorch/share/cmake/Torch;\n"
    "  - or install a PyTorch whose wheels use the C++11 ABI (2.7 or later) and configure a fresh build folder;\n"
    "  - or -DGRPO_WITH_CUDA=OFF (fresh build folder) to build CPU-only against the system LibTorch.")
endfunction()

# Step 2 above; call it before find_package(Torch). Sets CMAKE_PREFIX_PATH in the caller.
function(grpo_prefer_cuda_pytorch)
  if(NOT (GRPO_WITH_CUDA STREQUAL "AUTO" OR GRPO_WITH_CUDA STREQUAL "ON"))
    return()
  endif()
  # A Torch the user named wins (Torch_DIR is also cached by an earlier configure).
  if(Torch_DIR OR Torch_ROOT OR DEFINED ENV{Torch_DIR} OR DEFINED ENV{Torch_ROOT})
    return()
  endif()
  set(_env_prefixes "$ENV{CMAKE_PREFIX_PATH}")
  string(REPLACE ":" ";" _env_prefixes "${_env_prefixes}")
  _grpo_prefixes_hold_torch(_named ${CMAKE_PREFIX_PATH} ${_env_prefixes})
  if(_named)
    return()
  endif()

  find_program(GRPO_TORCH_PYTHON NAMES python3 python
               DOC "Python whose PyTorch (when it has CUDA) supplies LibTorch for GRPO_WITH_CUDA=AUTO/ON when no Torch_DIR is given")
  if(NOT GRPO_TORCH_PYTHON)
    return()
  endif()
  # One marked line (whatever else an import prints): CMake prefix, CUDA version ("" without
  # CUDA), C++11 ABI (1/0), version.
  execute_process(
    COMMAND "${GRPO_TORCH_PYTHON}" -c
            "import torch; print('grpo-torch-info|%s|%s|%d|%s' % (torch.utils.cmake_prefix_path, torch.version.cuda or '', int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.__version__))"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_QUIET TIMEOUT 120)
  if(NOT _rc EQUAL 0)
    message(STATUS "grpo: no PyTorch for ${GRPO_TORCH_PYTHON}; LibTorch from the default search")
    return()
  endif()
  if(NOT _out MATCHES "grpo-torch-info\\|([^|\n]*)\\|([^|\n]*)\\|([01])\\|([^|\n]*)")
    string(STRIP "${_out}" _out)
    message(STATUS "grpo: unexpected answer from ${GRPO_TORCH_PYTHON} about PyTorch ('${_out}'); LibTorch from the default search")
    return()
  endif()
  set(_prefix "${CMAKE_MATCH_1}")
  set(_cuda "${CMAKE_MATCH_2}")
  set(_abi "${CMAKE_MATCH_3}")
  set(_version "${CMAKE_MATCH_4}")
  if(_cuda STREQUAL "")
    message(STATUS "grpo: PyTorch ${_version} (${GRPO_TORCH_PYTHON}) has no CUDA; LibTorch from the default search")
    return()
  endif()
  if(NOT EXISTS "${_prefix}/Torch/TorchConfig.cmake")
    message(STATUS "grpo: PyTorch ${_version} with CUDA ${_cuda} has no ${_prefix}/Torch/TorchConfig.cmake; LibTorch from the default search")
    return()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    if(GRPO_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "GRPO_WITH_CUDA=ON: PyTorch ${_version} (${GRPO_TORCH_PYTHON}) has CUDA ${_cuda}, but no CUDA "
                          "compiler was found. Install the CUDA toolkit ${_cuda} (nvcc; a CUDA LibTorch's CMake "
                          "package needs it too) or point CUDACXX at its nvcc, or use -DGRPO_WITH_CUDA=OFF.")
    endif()
    message(STATUS "grpo: PyTorch ${_version} has CUDA ${_cuda} but no CUDA compiler was found (install the CUDA "
                   "toolkit or set CUDACXX); not used, LibTorch from the default search")
    return()
  endif()
  if(_abi STREQUAL "0")
    _grpo_old_abi_error("the LibTorch of PyTorch ${_version} (CUDA ${_cuda}) at ${_prefix}, found through ${GRPO_TORCH_PYTHON},")
  endif()
  message(STATUS "grpo: using the LibTorch of PyTorch ${_version} (CUDA ${_cuda}): ${_prefix}")
  set(CMAKE_PREFIX_PATH "${_prefix}" ${CMAKE_PREFIX_PATH} PARENT_SCOPE)
endfunction()

# After find_package(Torch): a LibTorch built with the old ABI cannot link with the system's
# C++ libraries, whoever chose it (TorchConfig.cmake puts its ABI in TORCH_CXX_FLAGS on Linux).
function(grpo_check_torch_abi)
  if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
    _grpo_old_abi_error("the LibTorch at ${Torch_DIR}")
  endif()
endfunction()

# TRUE in `out` when the CUDA LibTorch found has NCCL and nccl.h is there to compile against.
# Official PyTorch/LibTorch CUDA builds for Linux always ship NCCL, but custom builds
# (USE_NCCL=0, e.g. some Jetson wheels) do not, and the c10d headers (ProcessGroupNCCL.hpp) are
# installed either way, so the header proves nothing: the check looks for c10d::ProcessGroupNCCL
# among the dynamic symbols of libtorch_cuda*.so. Without nm, or without those libraries where
# TorchConfig.cmake says LibTorch is, it falls back to "a Linux CUDA build has NCCL". The
# answer is cached per library file, timestamp and size.
# c10d's NCCLUtils.hpp includes <nccl.h>, which pip's torch does not ship in torch/include (it
# is in the nvidia-nccl-cu* wheel beside it): GRPO_NCCL_INCLUDE_DIR finds it there, in the
# CUDA toolkit or the system, and is added to the torch target's include directories.
function(_grpo_torch_has_nccl out)
  file(GLOB _libs "${TORCH_INSTALL_PREFIX}/lib/libtorch_cuda*.so")
  if(NOT _libs OR NOT CMAKE_NM)
    message(STATUS "grpo: NCCL assumed (Linux CUDA LibTorch; no libtorch_cuda*.so under ${TORCH_INSTALL_PREFIX}/lib or no nm to check)")
    set(_has ON)
  else()
    set(_key "")
    foreach(_lib IN LISTS _libs)
      file(TIMESTAMP "${_lib}" _ts)
      file(SIZE "${_lib}" _size)
      list(APPEND _key "${_lib}@${_ts}/${_size}")
    endforeach()
    if(NOT "${_GRPO_NCCL_PROBE_KEY}" STREQUAL "${_key}")
      set(_probe OFF)
      foreach(_lib IN LISTS _libs)
        execute_process(COMMAND "${CMAKE_NM}" -D --defined-only "${_lib}"
                        COMMAND grep -q ProcessGroupNCCL
                        RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
        if(_rc EQUAL 0)
          set(_probe ON)
          break()
        endif()
      endforeach()
      set(_GRPO_NCCL_PROBE_KEY "${_key}" CACHE INTERNAL "libraries the NCCL probe looked at")
      set(_GRPO_NCCL_PROBE_RESULT "${_probe}" CACHE INTERNAL "whether they define c10d::ProcessGroupNCCL")
    endif()
    set(_has ${_GRPO_NCCL_PROBE_RESULT})
    if(NOT _has)
      message(STATUS "grpo: this LibTorch has no NCCL (no c10d::ProcessGroupNCCL in ${_libs}): dist.backend nccl unavailable")
    endif()
  endif()
  if(_has)
    find_path(GRPO_NCCL_INCLUDE_DIR nccl.h
      HINTS "${TORCH_INSTALL_PREFIX}/include" "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include"
            "$ENV{NCCL_ROOT}/include" "$ENV{NCCL_HOME}/include" "${CMAKE_CUDA_COMPILER_TOOLKIT_ROOT}/include"
      DOC "Folder of nccl.h, for c10d's NCCL headers")
    if(GRPO_NCCL_INCLUDE_DIR)
      set_property(TARGET torch APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${GRPO_NCCL_INCLUDE_DIR}")
    else()
      message(STATUS "grpo: LibTorch has NCCL but nccl.h was not found, so dist.backend nccl is left out of this build: "
                     "set -DGRPO_NCCL_INCLUDE_DIR=<folder of nccl.h> (pip: site-packages/nvidia/nccl/include; "
                     "Debian/Ubuntu: libnccl-dev)")
      set(_has OFF)
    endif()
  endif()
  set(${out} ${_has} PARENT_SCOPE)
endfunction()

# GRPO_WITH_CUDA: AUTO enables CUDA when LibTorch was built with it and a toolkit exists.
# Sets GRPO_HAVE_GLOO (gloo's headers found), GRPO_HAVE_CUDA and GRPO_HAVE_NCCL (ON when GRPO_HAVE_CUDA, on Linux, and LibTorch has
# c10d's NCCL process group: then USE_C10D_NCCL is defined for the code that uses it).
macro(grpo_configure_cuda)
  # c10d's ProcessGroupGloo.hpp includes gloo's own headers: Debian's libtorch-dev comes with
  # libgloo-dev, PyTorch's pip wheels ship none. Without them the Gloo backend is left out
  # (GPUs use NCCL); dist.backend gloo then says why.
  find_path(GRPO_GLOO_INCLUDE_DIR gloo/algorithm.h HINTS "${TORCH_INSTALL_PREFIX}/include"
            DOC "Folder holding gloo/algorithm.h, for c10d's Gloo process group")
  if(GRPO_GLOO_INCLUDE_DIR)
    set(GRPO_HAVE_GLOO ON)
    set_property(TARGET torch APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${GRPO_GLOO_INCLUDE_DIR}")
  else()
    set(GRPO_HAVE_GLOO OFF)
    message(STATUS "grpo: gloo's headers (gloo/algorithm.h) not found: dist.backend gloo is left out of this build "
                   "(set -DGRPO_GLOO_INCLUDE_DIR to the gloo this LibTorch was built with)")
  endif()
  set(GRPO_HAVE_CUDA OFF)
  set(GRPO_HAVE_NCCL OFF)
  set(_grpo_torch_cuda OFF)
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    set(_grpo_torch_cuda ON)
  endif()
  if(GRPO_WITH_CUDA STREQUAL "ON" OR GRPO_WITH_CUDA STREQUAL "AUTO")
    include(CheckLanguage)
    check_language(CUDA)
    if(_grpo_torch_cuda AND CMAKE_CUDA_COMPILER)
      enable_language(CUDA)
      set(GRPO_HAVE_CUDA ON)
    elseif(GRPO_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "GRPO_WITH_CUDA=ON but LibTorch has CUDA: ${_grpo_torch_cuda}, "
                          "CUDA compiler: '${CMAKE_CUDA_COMPILER}'. Use a CUDA LibTorch and toolkit, or -DGRPO_WITH_CUDA=OFF.")
    endif()
  endif()
  if(GRPO_HAVE_CUDA AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
    _grpo_torch_has_nccl(GRPO_HAVE_NCCL)
  endif()
  if(GRPO_HAVE_CUDA)
    message(STATUS "grpo: LibTorch ${Torch_VERSION} (${Torch_DIR}), CUDA code paths: ${GRPO_HAVE_CUDA}, NCCL: ${GRPO_HAVE_NCCL}")
  else()
    message(STATUS "grpo: LibTorch ${Torch_VERSION}, CUDA code paths: ${GRPO_HAVE_CUDA}")
  endif()
endmacro()

# A test fixture plugin: a MODULE library named libgrpo_<name>.so in the fixture folder's
# good/ or (with BAD) bad/ subfolder, so that discovery over good/ never meets a broken one.
function(grpo_add_fixture_plugin name)
  cmake_parse_arguments(ARG "TORCH;BAD" "" "SOURCES" ${ARGN})
  set(_dir "${GRPO_FIXTURE_PLUGIN_DIR}/good")
  if(ARG_BAD)
    set(_dir "${GRPO_FIXTURE_PLUGIN_DIR}/bad")
  endif()
  set(_torch_flag)
  if(ARG_TORCH)
    set(_torch_flag TORCH)
  endif()
  grpo_add_plugin(${name} SOURCES ${ARG_SOURCES} OUTPUT_DIRECTORY "${_dir}" NO_INSTALL ${_torch_flag})
endfunction()

# After find_package(Torch) and find_package(spdlog): PyTorch's pip wheels ship their own {fmt}
# (12.x) in torch/include, which, being on every torch target's include path, shadows the {fmt}
# the system's spdlog was built against (Debian/Ubuntu: 9.x; spdlog 1.10 does not compile with
# {fmt} >= 11). A folder holding only a link `fmt` to spdlog's {fmt} goes first on torch's
# include path, so spdlog and the c10d headers both compile against spdlog's {fmt}. The two
# {fmt}s never meet at link time: their symbols live in different inline namespaces (fmt::v9,
# fmt::v12), and LibTorch keeps its copy inside its own libraries.
function(grpo_put_spdlog_fmt_first)
  if(NOT TARGET torch OR NOT TARGET fmt::fmt OR NOT EXISTS "${TORCH_INSTALL_PREFIX}/include/fmt")
    return()
  endif()
  get_target_property(_fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  set(_fmt_dir "")
  foreach(_dir IN LISTS _fmt_dirs)
    if(EXISTS "${_dir}/fmt/core.h")
      set(_fmt_dir "${_dir}/fmt")
      break()
    endif()
  endforeach()
  if(NOT _fmt_dir)
    message(STATUS "grpo: LibTorch ships {fmt} and spdlog's {fmt} headers were not found; torch's goes first")
    return()
  endif()
  if(_fmt_dir STREQUAL "${TORCH_INSTALL_PREFIX}/include/fmt")
    return()
  endif()
  set(_shim "${CMAKE_BINARY_DIR}/grpo-spdlog-fmt")
  file(MAKE_DIRECTORY "${_shim}")
  file(CREATE_LINK "${_fmt_dir}" "${_shim}/fmt" SYMBOLIC)
  get_target_property(_torch_dirs torch INTERFACE_INCLUDE_DIRECTORIES)
  set_property(TARGET torch PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_shim};${_torch_dirs}")
  message(STATUS "grpo: LibTorch ships its own {fmt}; spdlog's (${_fmt_dir}) goes first on torch's include path")
endfunction()
