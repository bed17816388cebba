# xgrammar's C++ core (Apache-2.0; the PyPI sdist pinned by scripts/fetch_xgrammar.sh, unpacked in
# .cache/) as the static library `xgrammar`: cpp/ with the header-only picojson and dlpack. Not built:
# the Python bindings, tvm-ffi (cpp/tvm_ffi/), cpptrace (XGRAMMAR_ENABLE_CPPTRACE=0), its own tests.
# Only src/grammar/ links it. Third-party code: compiled without warnings, at the project's -O level.
set(CHORUS_XGRAMMAR_VERSION 0.2.9)
set(CHORUS_XGRAMMAR_DIR "${CMAKE_SOURCE_DIR}/.cache/xgrammar-${CHORUS_XGRAMMAR_VERSION}" CACHE PATH
    "Unpacked xgrammar ${CHORUS_XGRAMMAR_VERSION} sdist (scripts/fetch_xgrammar.sh puts it here)")
if(NOT EXISTS "${CHORUS_XGRAMMAR_DIR}/include/xgrammar/xgrammar.h"
   OR NOT EXISTS "${CHORUS_XGRAMMAR_DIR}/cpp/grammar_matcher.cc")
  message(FATAL_ERROR "xgrammar ${CHORUS_XGRAMMAR_VERSION} source not found in ${CHORUS_XGRAMMAR_DIR}: "
                      "run scripts/fetch_xgrammar.sh (scripts/setup.sh runs it) and configure again")
endif()
file(GLOB xgrammar_srcs CONFIGURE_DEPENDS "${CHORUS_XGRAMMAR_DIR}/cpp/*.cc"
     "${CHORUS_XGRAMMAR_DIR}/cpp/support/*.cc" "${CHORUS_XGRAMMAR_DIR}/cpp/converter_ext/*.cc")
add_library(xgrammar STATIC ${xgrammar_srcs})
# Build-tree only: its headers are not installed (nothing in include/chorus includes them).
target_include_directories(xgrammar SYSTEM PUBLIC $<BUILD_INTERFACE:${CHORUS_XGRAMMAR_DIR}/include>
                           $<BUILD_INTERFACE:${CHORUS_XGRAMMAR_DIR}/3rdparty/picojson>
                           $<BUILD_INTERFACE:${CHORUS_XGRAMMAR_DIR}/3rdparty/dlpack/include>)
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
target_compile_options(xgrammar PRIVATE -w)
target_link_libraries(xgrammar PUBLIC Threads::Threads)
