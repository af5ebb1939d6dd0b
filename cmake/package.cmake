# The installable package (README "Install", docs/embedding.md): `cmake --install` puts the
# public headers (include/kvtier), libkvtier (shared and static), the `kvtier` CLI, docs/, a CMake
# package config (find_package(kvtier 0.2 CONFIG) -> kvtier::kvtier) and kvtier.pc under a prefix.
#
# libkvtier holds the layers an embedding engine uses (core, device, transfer, tier, cache, server,
# connector), built from the object files the build already compiles for the per-layer static
# libraries (everything is position-independent), so the package costs two links, not a second
# compilation. With KVTIER_CUDA, the CUDA device is libkvtier_cuda (kvtier::cuda), so that only an
# engine that names CudaDevice links the CUDA runtime, as in the build.
#
# Targets exported:
#   kvtier::kvtier         libkvtier.so.<major>.<minor> (SONAME), needs only Threads from the
#                          consumer: no third-party header appears in include/kvtier
#   kvtier::cuda           libkvtier_cuda.so (KVTIER_CUDA builds; KVTIER_HAS_CUDA=1)
#   kvtier::kvtier_static  libkvtier.a, and kvtier::cuda_static: COMPONENTS static, which makes the
#                          package config find the libraries they link (xxhash, yaml-cpp, libzmq,
#                          libsodium, liburing, the static CUDA runtime)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVTIER_PACKAGE_LAYERS kvtier_core kvtier_device kvtier_transfer kvtier_tier_records kvtier_tier
    kvtier_cache kvtier_server_protocol kvtier_server kvtier_connector)
# 0.x: every minor release may change the ABI, so the SONAME carries major.minor.
set(KVTIER_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})

# The interface every packaged library shares: include/ (installed as include/kvtier), C++23.
function(kvtier_package_interface target)
  target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} INTERFACE cxx_std_23)
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
endfunction()

set(kvtier_objects)
foreach(layer IN LISTS KVTIER_PACKAGE_LAYERS)
  list(APPEND kvtier_objects $<TARGET_OBJECTS:${layer}>)
endforeach()

add_library(kvtier_shared SHARED ${kvtier_objects})
kvtier_package_interface(kvtier_shared)
set_target_properties(kvtier_shared PROPERTIES OUTPUT_NAME kvtier EXPORT_NAME kvtier
                      VERSION ${PROJECT_VERSION} SOVERSION ${KVTIER_SOVERSION})
# The layers' own link dependencies (their archives add nothing: every object is already in);
# --no-undefined makes a dependency missing here a link error of the build, not of an embedder.
target_link_libraries(kvtier_shared PUBLIC Threads::Threads PRIVATE ${KVTIER_PACKAGE_LAYERS})
target_link_options(kvtier_shared PRIVATE LINKER:--no-undefined)

# The private dependencies a static link needs, under the names the package config gives them.
pkg_check_modules(KVTIER_PKG_LIBURING REQUIRED IMPORTED_TARGET liburing)
add_library(kvtier_static STATIC ${kvtier_objects})
kvtier_package_interface(kvtier_static)
set_target_properties(kvtier_static PROPERTIES OUTPUT_NAME kvtier EXPORT_NAME kvtier_static)
target_link_libraries(kvtier_static INTERFACE Threads::Threads
  $<LINK_ONLY:PkgConfig::XXHASH> $<LINK_ONLY:yaml-cpp> $<LINK_ONLY:cppzmq> $<LINK_ONLY:spdlog::spdlog> $<LINK_ONLY:PkgConfig::SODIUM>
  $<LINK_ONLY:PkgConfig::KVTIER_PKG_LIBURING>)

set(kvtier_shared_targets kvtier_shared)
set(kvtier_static_targets kvtier_static)
if(KVTIER_CUDA)
  add_library(kvtier_cuda_shared SHARED $<TARGET_OBJECTS:kvtier_device_cuda>)
  kvtier_package_interface(kvtier_cuda_shared)
  set_target_properties(kvtier_cuda_shared PROPERTIES OUTPUT_NAME kvtier_cuda EXPORT_NAME cuda
                        VERSION ${PROJECT_VERSION} SOVERSION ${KVTIER_SOVERSION})
  target_link_libraries(kvtier_cuda_shared PUBLIC kvtier_shared PRIVATE CUDA::cudart_static)
  target_compile_definitions(kvtier_cuda_shared INTERFACE KVTIER_HAS_CUDA=1)
  target_link_options(kvtier_cuda_shared PRIVATE LINKER:--no-undefined)

  add_library(kvtier_cuda_static STATIC $<TARGET_OBJECTS:kvtier_device_cuda>)
  kvtier_package_interface(kvtier_cuda_static)
  set_target_properties(kvtier_cuda_static PROPERTIES OUTPUT_NAME kvtier_cuda
                        EXPORT_NAME cuda_static)
  target_link_libraries(kvtier_cuda_static INTERFACE kvtier_static
                        $<LINK_ONLY:CUDA::cudart_static>)
  target_compile_definitions(kvtier_cuda_static INTERFACE KVTIER_HAS_CUDA=1)
  list(APPEND kvtier_shared_targets kvtier_cuda_shared)
  list(APPEND kvtier_static_targets kvtier_cuda_static)
endif()

set(KVTIER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
install(TARGETS ${kvtier_shared_targets} EXPORT kvtier-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ${kvtier_static_targets} EXPORT kvtier-static-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kvtier RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # the CLI
# The directory, so that a header moved out of include/kvtier simply stops being installed.
install(DIRECTORY include/kvtier DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(EXPORT kvtier-targets NAMESPACE kvtier:: DESTINATION ${KVTIER_CMAKE_DIR})
install(EXPORT kvtier-static-targets NAMESPACE kvtier:: DESTINATION ${KVTIER_CMAKE_DIR})

configure_package_config_file(cmake/kvtier-config.cmake.in
                              ${PROJECT_BINARY_DIR}/package/kvtier-config.cmake
                              INSTALL_DESTINATION ${KVTIER_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/kvtier-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/kvtier-config.cmake
              ${PROJECT_BINARY_DIR}/package/kvtier-config-version.cmake
        DESTINATION ${KVTIER_CMAKE_DIR})

# kvtier.pc, relocatable: its prefix is found from where the file lies (${pcfiledir}).
file(RELATIVE_PATH KVTIER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/kvtier.pc.in ${PROJECT_BINARY_DIR}/package/kvtier.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/kvtier.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
