// The headers generated kernels include (kernels/functors.h): the text this library was built
// with, and the directory on disk holding the same text, which the compiler is given with -I.
#pragma once
#include <string>

namespace ember::compiler {

// The text of kernels/functors.h as this library was compiled with it (embedded at build
// time), so fused code computes what the eager kernels compute.
const std::string& functors_header();
// The text of core/philox.h, likewise: the generated CUDA code that draws (dropout) includes
// it, given to NVRTC from here.
const std::string& philox_header();

// The directory holding kernels/functors.h identical to functors_header(); the first of:
// $EMBER_KERNEL_INCLUDE_DIR (an explicit choice: an error when it does not match), share/ember/
// include above the program or shared library that holds ember, the install prefix configured
// at build time, the source tree. Throws Error naming the places tried when none matches.
const std::string& kernel_include_dir();

}  // namespace ember::compiler
