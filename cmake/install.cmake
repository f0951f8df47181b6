# mixgrad's install rules, included by the top-level CMakeLists.txt when MG_INSTALL is on.
#   cmake --install <build> --prefix P
# puts libmixgrad.a in P/lib, the public headers in P/include/mixgrad (still included as
# "core/tensor.h" or "mixgrad.h") and the package config in P/lib/cmake/mixgrad, so that another
# project can find_package(mixgrad CONFIG REQUIRED) and link mixgrad::mixgrad.
include(CMakePackageConfigHelpers)
set(MG_INSTALL_CONFIGDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mixgrad)

install(TARGETS mixgrad EXPORT mixgradTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The public headers: mixgrad.h and everything it reaches. Of kernels/ only the backend-neutral
# headers: kernels/cpu/ and kernels/cuda/ are the library's inside.
install(FILES mixgrad.h DESTINATION ${MG_INSTALL_INCLUDEDIR})
install(DIRECTORY core kernels dist autograd amp optim nn data train DESTINATION ${MG_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" REGEX "/kernels/(cpu|cuda)$" EXCLUDE)

install(EXPORT mixgradTargets NAMESPACE mixgrad:: DESTINATION ${MG_INSTALL_CONFIGDIR})
configure_package_config_file(cmake/mixgradConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/mixgradConfig.cmake
                              INSTALL_DESTINATION ${MG_INSTALL_CONFIGDIR})
# Before 1.0 a minor version may change the API; a patch version may not.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mixgradConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mixgradConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/mixgradConfigVersion.cmake
        DESTINATION ${MG_INSTALL_CONFIGDIR})
