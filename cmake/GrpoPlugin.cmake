# grpo_add_plugin(<name> SOURCES <src>... [TORCH] [OUTPUT_DIRECTORY <dir>] [INSTALL_DESTINATION <dir>] [NO_INSTALL])
#
# Builds a grpo plugin: a MODULE library named libgrpo_<name>.so (the host looks plugins up
# by that name), target name grpo_plugin_<name>.
#   - links grpo::sdk (torch-free), or grpo::sdk_torch with TORCH;
#   - hidden visibility and a version script: grpo_plugin_entry_v1 is the only exported symbol;
#   - --no-undefined: a missing symbol fails the link, not the load;
#   - installs into lib/grpo/plugins unless NO_INSTALL (or INSTALL_DESTINATION overrides it).
#
# Shipped with the SDK (find_package(grpo)) and used by the project itself.
function(grpo_add_plugin name)
  # Next to this file, wherever find_package() or include() happened.
  set(GRPO_PLUGIN_VERSION_SCRIPT "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/grpo_plugin.map")
  cmake_parse_arguments(ARG "TORCH;NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DESTINATION" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "grpo_add_plugin(${name}): SOURCES is required")
  endif()
  if(NOT name MATCHES "^[A-Za-z0-9_.-]+$")
    message(FATAL_ERROR "grpo_add_plugin(${name}): a plugin name uses only [A-Za-z0-9_.-]")
  endif()
  set(target grpo_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  if(ARG_TORCH)
    if(NOT TARGET grpo::sdk_torch)
      message(FATAL_ERROR "grpo_add_plugin(${name} TORCH): grpo::sdk_torch is missing; use find_package(grpo COMPONENTS torch)")
    endif()
    target_link_libraries(${target} PRIVATE grpo::sdk_torch)
  else()
    target_link_libraries(${target} PRIVATE grpo::sdk)
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "grpo_${name}"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    LINK_DEPENDS "${GRPO_PLUGIN_VERSION_SCRIPT}")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${GRPO_PLUGIN_VERSION_SCRIPT}" "LINKER:--no-undefined")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED GRPO_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${GRPO_PLUGIN_OUTPUT_DIR}")
  endif()
  if(NOT ARG_NO_INSTALL)
    if(ARG_INSTALL_DESTINATION)
      set(dest "${ARG_INSTALL_DESTINATION}")
    elseif(DEFINED GRPO_PLUGIN_INSTALL_DIR)
      set(dest "${GRPO_PLUGIN_INSTALL_DIR}")
    else()
      include(GNUInstallDirs)
      set(dest "${CMAKE_INSTALL_LIBDIR}/grpo/plugins")
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION "${dest}")
  endif()
endfunction()
