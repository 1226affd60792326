// The out-of-line Boost.Math part of kvphase for the test executables, which are built with
// KVPHASE_SEPARATE_COMPILATION (tests/CMakeLists.txt): compiled once per build instead of being
// parsed and generated in every test translation unit that includes stats/ or theory/.
#include <kvphase/src.hpp>
