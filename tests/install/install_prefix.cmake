# Install.IntoPrefix: cmake -DBUILD_DIR=... -DPREFIX=... -DVERSION=... -DDOCDIR=... -P this file.
# Installs the build into a fresh PREFIX and checks what an embedder finds there beyond the
# libraries and headers (the other Install tests use those): the CLI and the docs.
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}")
endif()
execute_process(COMMAND ${PREFIX}/bin/kvtier --version RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "kvtier ${VERSION}")
  message(FATAL_ERROR "installed CLI: expected 'kvtier ${VERSION}', got (${rc}): ${out}")
endif()
foreach(doc embedding.md integration.md)
  if(NOT EXISTS ${PREFIX}/${DOCDIR}/${doc})
    message(FATAL_ERROR "${DOCDIR}/${doc} was not installed")
  endif()
endforeach()
message(STATUS "installed kvtier ${VERSION} into ${PREFIX}")
