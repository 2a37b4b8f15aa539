# Installs the CMake package that out-of-tree plugin authors use:
#   find_package(grpo REQUIRED)                    -> grpo::sdk (torch-free), grpo_add_plugin()
#   find_package(grpo REQUIRED COMPONENTS torch)   -> also grpo::sdk_torch (needs LibTorch)
include(CMakePackageConfigHelpers)
set(GRPO_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/grpo")

install(EXPORT grpoSdkTargets NAMESPACE grpo:: DESTINATION "${GRPO_CMAKE_INSTALL_DIR}")
install(EXPORT grpoSdkTorchTargets NAMESPACE grpo:: DESTINATION "${GRPO_CMAKE_INSTALL_DIR}")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/grpoConfig.cmake.in"
  "${CMAKE_CURRENT_BINARY_DIR}/grpoConfig.cmake"
  INSTALL_DESTINATION "${GRPO_CMAKE_INSTALL_DIR}"
  PATH_VARS GRPO_PLUGIN_INSTALL_DIR)
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/grpoConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/grpoConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/grpoConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/GrpoPlugin.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/grpo_plugin.map"
  DESTINATION "${GRPO_CMAKE_INSTALL_DIR}")
