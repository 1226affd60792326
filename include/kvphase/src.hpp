#pragma once
/// \file src.hpp  The out-of-line part of kvphase for programs built with
/// KVPHASE_SEPARATE_COMPILATION (see core/special.hpp): include it in exactly one translation
/// unit of the program. It defines the Boost.Math-backed functions that stats/ and theory/ call,
/// so that no other TU parses Boost.Math. Without the macro it only repeats the inline
/// definitions the headers already give (harmless).
#include "kvphase/core/detail/special_impl.hpp"
