# Writes a C++ source defining `const char NAME[]` as the text of IN (cmake -DIN=... -DOUT=...
# -DNAME=... -P embed_text.cmake): the library keeps the functor header it was built with, so
# it can tell a matching copy on disk from a stale one (src/compiler/kernel_headers.cpp).
file(READ "${IN}" text)
string(FIND "${text}" ")ember_embedded\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )ember_embedded\"")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by cmake/embed_text.cmake; do not edit.\n"
  "namespace ember::compiler {\n"
  "extern const char ${NAME}[];\n"
  "const char ${NAME}[] = R\"ember_embedded(${text})ember_embedded\";\n"
  "}  // namespace ember::compiler\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
