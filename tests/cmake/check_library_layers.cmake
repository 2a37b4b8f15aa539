# ctest: what the built libraries link and export.
#   cmake -DNATIVE_PLUGIN=<libgrpo_native.so> -DCORE_LIBRARY=<libgrpo-core.so> -P check_library_layers.cmake
#   - the native rollout backend links libgrpo-model and not libgrpo-core (readelf -d): a
#     backend needs the decoder and tokenizer, never the trainer or the command lines;
#   - libgrpo-core exports no command-line entry point (no defined dynamic symbol named
#     *_main): the programs' code lives under apps/.
find_program(READELF readelf REQUIRED)
find_program(NM nm REQUIRED)
foreach(var NATIVE_PLUGIN CORE_LIBRARY)
  if(NOT ${var} OR NOT EXISTS "${${var}}")
    message(FATAL_ERROR "${var}='${${var}}' does not exist")
  endif()
endforeach()

execute_process(COMMAND ${READELF} -d -W "${NATIVE_PLUGIN}" OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${dyn}")
if(NOT rc EQUAL 0 OR needed STREQUAL "")
  message(FATAL_ERROR "readelf -d printed no NEEDED entries for ${NATIVE_PLUGIN}")
endif()
message(STATUS "NEEDED entries of ${NATIVE_PLUGIN}:\n${needed}")
if(needed MATCHES "libgrpo-core")
  message(FATAL_ERROR "${NATIVE_PLUGIN} links libgrpo-core: a rollout backend links the model library (libgrpo-model) only")
endif()
if(NOT needed MATCHES "libgrpo-model")
  message(FATAL_ERROR "${NATIVE_PLUGIN} does not link libgrpo-model: the test no longer sees how the backend gets its model")
endif()

execute_process(COMMAND ${NM} -D -C --defined-only "${CORE_LIBRARY}" OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR syms STREQUAL "")
  message(FATAL_ERROR "nm -D printed no symbols for ${CORE_LIBRARY}")
endif()
string(REGEX MATCHALL "[^\n]*[A-Za-z0-9]_main\\([^\n]*" mains "${syms}")
if(mains)
  string(REPLACE ";" "\n  " listed "${mains}")
  message(FATAL_ERROR "${CORE_LIBRARY} exports command-line entry points (they belong under apps/):\n  ${listed}")
endif()
message(STATUS "ok: the native backend links libgrpo-model, not libgrpo-core; libgrpo-core exports no *_main")
