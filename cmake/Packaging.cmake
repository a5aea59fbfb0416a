# Install rules beyond the binary (daemon/CMakeLists.txt installs it to <prefix>/bin) and
# the Debian package: `cd build && cpack -G DEB` -> gpu-devwatch_<version>-1_<arch>.deb
# (`cd build-arm64 && cpack -G DEB` for the arm64 cross-build).
#
#   <prefix>/bin/gpu-devwatch                          the daemon
#   /etc/gpu-devwatch/gpu-devwatch.yaml                configuration (a conffile)
#   <prefix>/lib/systemd/system/gpu-devwatch.service   the unit, ExecStart= at <prefix>/bin
#   <prefix>/share/gpu-devwatch/                       alert rules, dashboard, unit drop-in
#
# The prefix is /usr in the package and /usr/local for a plain `cmake --install build`;
# systemd reads units from both lib/systemd/system directories. A plain install keeps an
# existing /etc/gpu-devwatch/gpu-devwatch.yaml (an operator's edits); the package lets dpkg
# handle it as a conffile.

set(GDW_SHARE_DIR share/gpu-devwatch)
# cpack (and `make install`) package what is built instead of building every target first:
# scripts/build.sh builds, and the package test runs cpack beside other tests.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

# The unit names the binary by absolute path: write it with this install's prefix.
install(CODE "set(gdw_unit_source \"${PROJECT_SOURCE_DIR}/deploy/systemd/gpu-devwatch.service\")
set(gdw_config_source \"${PROJECT_SOURCE_DIR}/config/gpu-devwatch.yaml\")")
install(CODE [[
  file(READ "${gdw_unit_source}" gdw_unit)
  string(REPLACE "\nExecStart=/usr/local/bin/gpu-devwatch " "\nExecStart=${CMAKE_INSTALL_PREFIX}/bin/gpu-devwatch "
         gdw_unit "${gdw_unit}")
  string(FIND "${gdw_unit}" "\nExecStart=${CMAKE_INSTALL_PREFIX}/bin/gpu-devwatch " gdw_exec_start)
  if(gdw_exec_start EQUAL -1)
    message(FATAL_ERROR "gpu-devwatch.service: ExecStart= is not /usr/local/bin/gpu-devwatch; update cmake/Packaging.cmake")
  endif()
  set(gdw_unit_path "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/systemd/system/gpu-devwatch.service")
  message(STATUS "Installing: ${gdw_unit_path}")
  file(WRITE "${gdw_unit_path}" "${gdw_unit}")
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${gdw_unit_path}")

  set(gdw_config_path "$ENV{DESTDIR}/etc/gpu-devwatch/gpu-devwatch.yaml")
  if(EXISTS "${gdw_config_path}")
    message(STATUS "Keeping: ${gdw_config_path} (the shipped one is ${gdw_config_source})")
  else()
    # file(INSTALL) puts DESTDIR in front of the absolute destination itself.
    file(INSTALL "${gdw_config_source}" DESTINATION "/etc/gpu-devwatch"
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  endif()
]])

install(FILES ${PROJECT_SOURCE_DIR}/deploy/prometheus/gpu-devwatch-rules.yaml DESTINATION ${GDW_SHARE_DIR}/prometheus)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/grafana/gpu-devwatch-dashboard.json DESTINATION ${GDW_SHARE_DIR}/grafana)
# Not active: copy it into /etc/systemd/system/gpu-devwatch.service.d/ together with
# kubelet.remediate_stale_checkpoint: true.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/systemd/gpu-devwatch.service.d DESTINATION ${GDW_SHARE_DIR}/systemd)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/kubernetes/daemonset.yaml ${PROJECT_SOURCE_DIR}/deploy/kubernetes/networkpolicy.yaml
              ${PROJECT_SOURCE_DIR}/deploy/kubernetes/admission-policy.yaml
        DESTINATION ${GDW_SHARE_DIR}/kubernetes)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/consumers/node-readiness-rule.yaml DESTINATION ${GDW_SHARE_DIR}/consumers)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gpu-devwatch)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "keeps allocated GPU device nodes allowed in Kubernetes containers")
set(CPACK_PACKAGE_DESCRIPTION
    "A node daemon that watches the device cgroups (v1 devices.allow, v2 device programs) of\n"
    "GPU containers and grants back the devices kubelet allocated to them when a runtime,\n"
    "systemd or anything else revokes them. Built from revision ${GDW_GIT_REVISION}.")
string(JOIN "" CPACK_PACKAGE_DESCRIPTION ${CPACK_PACKAGE_DESCRIPTION})
set(GDW_PACKAGE_MAINTAINER "gpu-devwatch maintainers <root@localhost>" CACHE STRING
    "The Maintainer: field of the Debian package")
set(CPACK_PACKAGE_CONTACT "${GDW_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# cpack asks dpkg for the architecture, which is the build machine's: a cross-build names
# its target's (build-arm64: gpu-devwatch_<version>-1_arm64.deb). dpkg-shlibdeps finds
# the :arm64 libraries' symbols through /etc/ld.so.conf.d/aarch64-linux-gnu.conf.
if(CMAKE_CROSSCOMPILING)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
    set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
  else()
    message(FATAL_ERROR "Packaging: no Debian architecture for ${CMAKE_SYSTEM_PROCESSOR}")
  endif()
endif()
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends: from the libraries the binary links (dpkg-shlibdeps, package dpkg-dev).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/cmake/debian/conffiles ${PROJECT_SOURCE_DIR}/cmake/debian/postinst
    ${PROJECT_SOURCE_DIR}/cmake/debian/prerm ${PROJECT_SOURCE_DIR}/cmake/debian/postrm)
include(CPack)
