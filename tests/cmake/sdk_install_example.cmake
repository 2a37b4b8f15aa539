# ctest: install the project to a temporary prefix, build examples/custom_reward against the
# installed SDK (find_package(grpo)), and load it with the installed grpo-run through
# GRPO_PLUGIN_PATH.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -P sdk_install_example.cmake
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR LIBDIR TORCH_PLUGIN_SOURCE)
  if(NOT ${v})
    message(FATAL_ERROR "${v} is required")
  endif()
endforeach()
set(prefix "${WORK_DIR}/prefix")
set(example_build "${WORK_DIR}/example-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (exit ${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
foreach(f include/grpo/sdk/plugin.h ${LIBDIR}/cmake/grpo/grpoConfig.cmake ${LIBDIR}/cmake/grpo/GrpoPlugin.cmake
          bin/grpo-run ${LIBDIR}/grpo/plugins/libgrpo_exact_match.so)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install did not produce ${prefix}/${f}")
  endif()
endforeach()

# A clean configure: only the installed prefix is known, not the build tree.
run_step("configure example" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/custom_reward" -B "${example_build}"
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run_step("build example" ${CMAKE_COMMAND} --build "${example_build}")
set(plugin "${example_build}/libgrpo_custom_reward.so")
if(NOT EXISTS "${plugin}")
  message(FATAL_ERROR "the example did not produce ${plugin}")
endif()
run_step("linkage check" ${CMAKE_COMMAND} -DPLUGIN=${plugin} -P "${CMAKE_CURRENT_LIST_DIR}/check_plugin_linkage.cmake")

# The config lives elsewhere, so the plugin is found through GRPO_PLUGIN_PATH only.
file(WRITE "${WORK_DIR}/config/reward.yaml"
"verifiers:\n  - name: custom_reward/keyword_coverage\n    min_fraction: 0.5\n  - name: exact_match\n")
run_step("grpo-run --validate-fragment" ${CMAKE_COMMAND} -E env GRPO_PLUGIN_PATH=${example_build}
         "${prefix}/bin/grpo-run" --validate-fragment --config "${WORK_DIR}/config/reward.yaml")
if(NOT step_output MATCHES "verifiers\\[0\\]=custom_reward/keyword_coverage")
  message(FATAL_ERROR "grpo-run --validate-fragment did not construct the example verifier:\n${step_output}")
endif()
run_step("grpo-run --list-plugins" ${CMAKE_COMMAND} -E env GRPO_PLUGIN_PATH=${example_build}
         "${prefix}/bin/grpo-run" --list-plugins)
if(NOT step_output MATCHES "keyword_coverage +verifier +0\\.1\\.0 +custom_reward +[^\n]*libgrpo_custom_reward\\.so")
  message(FATAL_ERROR "--list-plugins does not list the example:\n${step_output}")
endif()

# Without the search path entry the name does not resolve, with a clear error (exit 4).
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=GRPO_PLUGIN_PATH
                "${prefix}/bin/grpo-run" --validate-fragment --config "${WORK_DIR}/config/reward.yaml"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 4 OR NOT "${out}${err}" MATCHES "libgrpo_custom_reward.so not found")
  message(FATAL_ERROR "expected exit 4 naming libgrpo_custom_reward.so, got ${rc}:\n${out}${err}")
endif()
# A torch plugin against the installed package: find_package(grpo COMPONENTS torch).
set(torch_src "${WORK_DIR}/torch-plugin")
file(MAKE_DIRECTORY "${torch_src}")
file(WRITE "${torch_src}/CMakeLists.txt"
"cmake_minimum_required(VERSION 3.18)
project(torch_plugin LANGUAGES CXX)
find_package(grpo REQUIRED COMPONENTS torch)
grpo_add_plugin(fixture_torch TORCH SOURCES \"${TORCH_PLUGIN_SOURCE}\" OUTPUT_DIRECTORY \"\${CMAKE_BINARY_DIR}\")
")
run_step("configure torch plugin" ${CMAKE_COMMAND} -S "${torch_src}" -B "${torch_src}/build"
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run_step("build torch plugin" ${CMAKE_COMMAND} --build "${torch_src}/build")
file(WRITE "${WORK_DIR}/config/torch.yaml"
"algorithm:\n  advantage: fixture_centered\n  kl_estimator: {name: fixture_torch/fixture_k1}\n")
run_step("grpo-run --validate-fragment (torch plugin)" ${CMAKE_COMMAND} -E env GRPO_PLUGIN_PATH=${torch_src}/build
         "${prefix}/bin/grpo-run" --validate-fragment --config "${WORK_DIR}/config/torch.yaml")
if(NOT step_output MATCHES "algorithm.advantage=fixture_centered" OR NOT step_output MATCHES "algorithm.kl_estimator=fixture_torch/fixture_k1")
  message(FATAL_ERROR "grpo-run --validate-fragment did not construct the torch plugin's components:\n${step_output}")
endif()
message(STATUS "ok: installed SDK builds the example and a torch plugin; grpo-run loads them via GRPO_PLUGIN_PATH")
