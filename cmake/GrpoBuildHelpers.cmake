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

# GRPO_WITH_CUDA: AUTO enables CUDA when LibTorch was built with it and a toolkit exists.
macro(grpo_configure_cuda)
  set(GRPO_HAVE_CUDA OFF)
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
  message(STATUS "grpo: LibTorch ${Torch_VERSION}, CUDA code paths: ${GRPO_HAVE_CUDA}")
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
