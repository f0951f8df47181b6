# Writes OUTPUT, the header tools/repro/manifest.cpp reads the program's version from: VERSION (the
# CMake project's) and the git commit of SOURCE_DIR ("-dirty" when tracked files differ from it;
# "unknown" where there is no git or no repository, as in a build from a tarball).
#   cmake -DSOURCE_DIR=... -DVERSION=0.1.0 -DOUTPUT=.../program_version.h -P program_version.cmake
# Run at every build (tools/CMakeLists.txt), it rewrites OUTPUT only when the text changes, so that
# a new commit recompiles one file and an unchanged tree recompiles nothing.
set(commit "unknown")
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12 --exclude=*
                OUTPUT_VARIABLE described RESULT_VARIABLE failed OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT failed AND described MATCHES "^[0-9a-f]+(-dirty)?$")
  set(commit "${described}")
endif()
set(text "// Made by tools/repro/program_version.cmake at build time; do not edit.
#pragma once
#define MG_PROGRAM_VERSION \"${VERSION}\"
#define MG_PROGRAM_COMMIT \"${commit}\"
")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
