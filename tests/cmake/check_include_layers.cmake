# ctest: the include graph respects the layers of docs/architecture.md.
#   cmake -DROOT=<source tree> -P check_include_layers.cmake
# Rules (a quoted project include "core/<folder>/..." counts; <...> system includes do not):
#   - the model library (core/{util,model,tokenizer,jinja}) includes nothing else of core/: the
#     native backend plugin links it alone; the Jinja engine (core/jinja) includes only core/util;
#   - core/{util,config,plugin,model,tokenizer,data,algo,metrics,optim} include nothing from
#     core/{runtime,tools,dist,train,app}: only the runtime and the trainer sit above them;
#   - the top layers in one order, runtime < tools < dist < train: core/runtime includes nothing
#     of core/{tools,dist,train}, core/tools nothing of core/{dist,train}, core/dist nothing of
#     core/train (what two of them share sits in the lower one: the optimizer in core/optim, a
#     tool's schema check in core/runtime, a tool call's record in core/tools);
#   - LoRA sits on the model, not in it: no core/model file but lora.{h,cpp} includes
#     core/model/lora.h (the model knows adapters only through ProjectionHook, projection.h);
#   - nothing in core/ includes apps/ or plugins/; the SDK includes nothing of core/, apps/,
#     plugins/;
#   - a plugin (plugins/<kind>/<name>/) includes only the SDK, the model library
#     (core/{model,tokenizer,jinja,util}), plugins/shared/ and its own folder (a name without a
#     folder is its own); plugins/shared/<name>/ likewise, with plugins/shared/ for its own.
# Every violation is listed as "file:line: #include ..." with the rule it breaks.
if(NOT ROOT OR NOT IS_DIRECTORY "${ROOT}/core")
  message(FATAL_ERROR "ROOT='${ROOT}' has no core/ folder")
endif()

set(violations "")
set(checked 0)
# check_folder(FOLDER REGEX RULE [EXCEPT FILE_REGEX] [ONLY]): no file under FOLDER (but those
# whose path matches FILE_REGEX) includes a path matching REGEX; with ONLY, REGEX is what may be
# included instead: a path with a folder in it that does not match is the violation.
function(check_folder folder regex rule)
  cmake_parse_arguments(ARG "ONLY" "EXCEPT" "" ${ARGN})
  file(GLOB_RECURSE files RELATIVE "${ROOT}" "${ROOT}/${folder}/*.h" "${ROOT}/${folder}/*.cpp" "${ROOT}/${folder}/*.inc")
  foreach(f IN LISTS files)
    if(ARG_EXCEPT AND f MATCHES "${ARG_EXCEPT}")
      continue()
    endif()
    file(STRINGS "${ROOT}/${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    math(EXPR checked "${checked} + 1")
    foreach(line IN LISTS lines)
      string(REGEX MATCH "\"([^\"]+)\"" _ "${line}")
      set(target "${CMAKE_MATCH_1}")
      if(ARG_ONLY)
        if(target MATCHES "/" AND NOT target MATCHES "${regex}")
          list(APPEND violations "${f}: ${line}   (${rule})")
        endif()
      elseif(target MATCHES "${regex}")
        list(APPEND violations "${f}: ${line}   (${rule})")
      endif()
    endforeach()
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)
  set(checked ${checked} PARENT_SCOPE)
endfunction()

foreach(folder util model tokenizer jinja)
  check_folder("core/${folder}" "^(core/(config|plugin|data|algo|metrics|runtime|train|dist|app)/|apps/|plugins/)"
               "the model library core/{util,model,tokenizer,jinja} includes only itself and the SDK")
endforeach()
check_folder("core/jinja" "^core/(model|tokenizer)/" "the Jinja engine sits below the tokenizer and the model")
check_folder("core/model" "^core/model/lora\\.h$" "LoRA sits on the model: core/model knows adapters only through ProjectionHook"
             EXCEPT "^core/model/lora\\.(h|cpp)$")
foreach(folder config plugin data algo metrics optim)
  check_folder("core/${folder}" "^(core/(runtime|tools|dist|train|app)/|apps/|plugins/)"
               "core/${folder} sits below core/{runtime,tools,dist,train,app}")
endforeach()
check_folder("core/runtime" "^core/(tools|dist|train)/" "core/runtime sits below core/{tools,dist,train}")
check_folder("core/tools" "^core/(dist|train)/" "core/tools sits below core/{dist,train}")
check_folder("core/dist" "^core/train/" "core/dist sits below core/train")
foreach(folder runtime tools dist train app)
  if(IS_DIRECTORY "${ROOT}/core/${folder}")
    check_folder("core/${folder}" "^(apps/|plugins/)" "core/ never includes apps/ or plugins/")
  endif()
endforeach()
check_folder("sdk" "^(core/|apps/|plugins/)" "the SDK stands alone")

file(GLOB plugin_kinds LIST_DIRECTORIES true RELATIVE "${ROOT}/plugins" "${ROOT}/plugins/*")
foreach(kind IN LISTS plugin_kinds)
  if(NOT IS_DIRECTORY "${ROOT}/plugins/${kind}")
    continue()
  endif()
  file(GLOB plugin_names LIST_DIRECTORIES true RELATIVE "${ROOT}/plugins/${kind}" "${ROOT}/plugins/${kind}/*")
  foreach(name IN LISTS plugin_names)
    if(NOT IS_DIRECTORY "${ROOT}/plugins/${kind}/${name}")
      continue()
    endif()
    check_folder("plugins/${kind}/${name}"
                 "^(grpo/sdk/|core/(model|tokenizer|jinja|util)/|plugins/shared/|plugins/${kind}/${name}/)"
                 "a plugin includes only the SDK, the model library, plugins/shared/ and its own folder" ONLY)
  endforeach()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "no source file found under ${ROOT}/core: nothing was checked")
endif()
if(violations)
  string(REPLACE ";" "\n  " listed "${violations}")
  message(FATAL_ERROR "include layering violated:\n  ${listed}")
endif()
message(STATUS "ok: ${checked} files under core/, sdk/ and plugins/ respect the include layers")
