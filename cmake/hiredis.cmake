# hiredis 1.5.0 (BSD-3-Clause; vendored in the `hiredis` PyPI sdist pinned by scripts/fetch_hiredis.sh,
# unpacked in .cache/) as two static libraries, the way its own CMakeLists.txt splits them:
# `hiredis` (the client) and `hiredis_ssl` (TLS on OpenSSL: rediss:// in src/remote/). The one
# hiredis of the build: Debian's libhiredis 0.14 has no TLS. Only src/remote/ links them.
# Third-party code: compiled without warnings, at the project's -O level.
set(CHORUS_HIREDIS_VERSION 3.5.0)
set(CHORUS_HIREDIS_DIR "${CMAKE_SOURCE_DIR}/.cache/hiredis-${CHORUS_HIREDIS_VERSION}" CACHE PATH
    "Unpacked hiredis ${CHORUS_HIREDIS_VERSION} sdist (scripts/fetch_hiredis.sh puts it here)")
set(hiredis_src "${CHORUS_HIREDIS_DIR}/vendor/hiredis")
if(NOT EXISTS "${hiredis_src}/hiredis.c" OR NOT EXISTS "${hiredis_src}/ssl.c")
  message(FATAL_ERROR "hiredis source (PyPI sdist ${CHORUS_HIREDIS_VERSION}) not found in ${CHORUS_HIREDIS_DIR}: "
                      "run scripts/fetch_hiredis.sh (scripts/setup.sh runs it) and configure again")
endif()
find_package(OpenSSL REQUIRED COMPONENTS SSL Crypto)
add_library(hiredis STATIC ${hiredis_src}/alloc.c ${hiredis_src}/async.c ${hiredis_src}/dict.c
            ${hiredis_src}/hiredis.c ${hiredis_src}/net.c ${hiredis_src}/read.c ${hiredis_src}/sds.c
            ${hiredis_src}/sockcompat.c)
add_library(hiredis_ssl STATIC ${hiredis_src}/ssl.c)
# <hiredis/hiredis.h>, <hiredis/hiredis_ssl.h>; build-tree only (no installed header includes them).
target_include_directories(hiredis SYSTEM PUBLIC $<BUILD_INTERFACE:${CHORUS_HIREDIS_DIR}/vendor>)
target_include_directories(hiredis PRIVATE ${hiredis_src})
target_include_directories(hiredis_ssl PRIVATE ${hiredis_src})
foreach(t hiredis hiredis_ssl)
  set_target_properties(${t} PROPERTIES C_STANDARD 99 POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${t} PRIVATE -w)
endforeach()
target_link_libraries(hiredis_ssl PUBLIC hiredis OpenSSL::SSL OpenSSL::Crypto)
