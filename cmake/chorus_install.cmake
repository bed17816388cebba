# `cmake --install build --prefix P`: the public headers (every include/chorus/*.h), the engine's and
# the server's static libraries and a CMake package, so that find_package(chorus) gives the target chorus::chorus
# with its link dependencies (examples/hello_chorus builds this way; tests/api runs it).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/chorus DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
# chorus_server (chorus/server.h), chorus_engine and every library below it (the link lines of
# src/*/CMakeLists.txt).
set(chorus_installed_libraries chorus_server chorus_engine chorus_grammar xgrammar chorus_encoder chorus_model chorus_policy chorus_remote hiredis_ssl hiredis chorus_kv
                               chorus_ops chorus_gguf chorus_util)
install(TARGETS chorus_api ${chorus_installed_libraries} EXPORT chorusTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(chorus_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
install(EXPORT chorusTargets NAMESPACE chorus:: DESTINATION ${chorus_cmake_dir})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/chorusConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/chorusConfig.cmake INSTALL_DESTINATION ${chorus_cmake_dir})
install(FILES ${CMAKE_BINARY_DIR}/cmake/chorusConfig.cmake DESTINATION ${chorus_cmake_dir})
