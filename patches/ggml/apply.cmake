# Applies this folder's patches to ggml's CPU backend when llama-cpp-sys-2 configures llama.cpp.
#
# .cargo/config.toml sets CMAKE_PROJECT_ggml_INCLUDE to this file; llama-cpp-sys-2 hands every
# CMAKE_* variable to CMake, which includes it at ggml's project() call. Once every target of the
# build is defined, each CPU backend target compiles a patched copy of ggml-cpu.c (kept in the
# build folder) in place of the original. A patch that no longer applies stops the configure
# with the reason; the build never goes on with stock kernels silently.
cmake_minimum_required(VERSION 3.21) # cmake_language(DEFER), file(COPY_FILE)

function(medusa_patch_ggml_cpu ggml_dir)
    set(MEDUSA_GGML_PATCH "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/batched-verification.patch")
    set(original "${ggml_dir}/src/ggml-cpu/ggml-cpu.c")
    set(work "${CMAKE_BINARY_DIR}/medusa-patched")
    file(REMOVE_RECURSE "${work}/scratch")
    file(MAKE_DIRECTORY "${work}/scratch")
    file(COPY_FILE "${original}" "${work}/scratch/ggml-cpu.c")
    execute_process(
        COMMAND patch --batch --forward --silent -p1 -d "${work}/scratch" -i "${MEDUSA_GGML_PATCH}"
        RESULT_VARIABLE failed
        OUTPUT_VARIABLE out
        ERROR_VARIABLE err)
    if(failed)
        message(FATAL_ERROR
            "${MEDUSA_GGML_PATCH} does not apply to ${original} (llama-cpp-sys-2 changed?): "
            "${out}${err}Update the patch for this llama.cpp, or remove it and its call.")
    endif()
    # Copied only when changed, so that a reconfigure does not rebuild an unchanged file.
    file(COPY_FILE "${work}/scratch/ggml-cpu.c" "${work}/ggml-cpu.c" ONLY_IF_DIFFERENT)
    file(COPY_FILE "${MEDUSA_GGML_PATCH}" "${work}/applied.patch" ONLY_IF_DIFFERENT)
    file(REMOVE_RECURSE "${work}/scratch")

    get_property(targets DIRECTORY "${ggml_dir}/src" PROPERTY BUILDSYSTEM_TARGETS)
    set(patched 0)
    foreach(target IN LISTS targets)
        if(NOT target MATCHES "^ggml-cpu(-.+)?$" OR target MATCHES "-feats$")
            continue()
        endif()
        get_target_property(sources ${target} SOURCES)
        list(TRANSFORM sources REPLACE "^ggml-cpu/ggml-cpu\\.c$" "${work}/ggml-cpu.c")
        if(NOT "${work}/ggml-cpu.c" IN_LIST sources)
            message(FATAL_ERROR "target ${target} does not compile ggml-cpu/ggml-cpu.c: cannot patch it")
        endif()
        set_property(TARGET ${target} PROPERTY SOURCES ${sources})
        math(EXPR patched "${patched} + 1")
    endforeach()
    if(patched EQUAL 0)
        message(FATAL_ERROR "no ggml CPU backend target found in ${ggml_dir}/src to patch")
    endif()
    message(STATUS "medusa: ggml-cpu.c patched with ${MEDUSA_GGML_PATCH} in ${patched} target(s)")
endfunction()

# The CPU backend targets are defined later, in ggml/src: patch them once the whole tree is read.
cmake_language(EVAL CODE
    "cmake_language(DEFER DIRECTORY \"${CMAKE_SOURCE_DIR}\" CALL medusa_patch_ggml_cpu \"${CMAKE_CURRENT_SOURCE_DIR}\")")
