# `cmake --install`: the public headers, libember.a (and libember.so), ember-gpt, ember-bench,
# the header generated kernels include (kernels/functors.h, under share/ember/include), a CMake
# package (find_package(ember), target ember::ember) and a pkg-config file (ember.pc).
include(CMakePackageConfigHelpers)

set(EMBER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ember)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/ember DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_SOURCE_DIR}/src/kernels/functors.h
        DESTINATION ${EMBER_KERNEL_INCLUDE_SUBDIR}/kernels)
install(TARGETS ${EMBER_LIBRARY_TARGETS} EXPORT emberTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ember-gpt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# ember-gpt's default text, found beside the installed program.
install(FILES ${CMAKE_SOURCE_DIR}/data/tinyshakespeare.txt
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ember/data)
if(EMBER_BUILD_BENCH)
  install(TARGETS ember-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${EMBER_CMAKE_DIR})
# emberConfig.cmake finds OpenBLAS where this build found it first, then where Debian keeps
# its OpenMP build.
get_filename_component(EMBER_OPENBLAS_DIR ${OPENBLAS_LIBRARY} DIRECTORY)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/emberConfig.cmake.in
  ${CMAKE_BINARY_DIR}/emberConfig.cmake INSTALL_DESTINATION ${EMBER_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/emberConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/emberConfig.cmake ${CMAKE_BINARY_DIR}/emberConfigVersion.cmake
        DESTINATION ${EMBER_CMAKE_DIR})

# ember.pc: -lember (the shared library when built, else the static one and its dependencies).
set(EMBER_PC_DEPS "-L${EMBER_OPENBLAS_DIR} -lopenblas ${OpenMP_CXX_FLAGS} -lpthread -ldl")
if(EMBER_WITH_MPI)
  foreach(lib ${MPI_CXX_LIBRARIES})
    string(APPEND EMBER_PC_DEPS " ${lib}")
  endforeach()
endif()
if(EMBER_WITH_CUDA)
  string(APPEND EMBER_PC_DEPS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lcublas -lcublasLt -lrt")
endif()
if(EMBER_BUILD_SHARED)
  set(EMBER_PC_LIBS "-L\${libdir} -lember")
  set(EMBER_PC_LIBS_PRIVATE "${EMBER_PC_DEPS}")
else()
  set(EMBER_PC_LIBS "-L\${libdir} -lember ${EMBER_PC_DEPS}")
  set(EMBER_PC_LIBS_PRIVATE "")
endif()
# The prefix relative to the .pc file, so that an installed tree can be moved.
file(RELATIVE_PATH EMBER_PC_PREFIX_FROM_PCDIR
  ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
configure_file(${CMAKE_SOURCE_DIR}/cmake/ember.pc.in ${CMAKE_BINARY_DIR}/ember.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ember.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
